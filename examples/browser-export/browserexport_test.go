package browserexport_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	browserexport "github.com/airlock-run/airlock/examples/browser-export"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// The partner's back-office: the orders and their rows only after a
// login, a wrong password refused, and the export's button on the page.
func TestPartner(t *testing.T) {
	srv := httptest.NewServer(&browserexport.Partner{User: "demo", Password: "pw", Rows: 7})
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/api/orders"); code != http.StatusUnauthorized {
		t.Errorf("rows before a login: %d %q", code, body)
	}
	if _, body := get("/orders"); !strings.Contains(body, `name="password"`) {
		t.Errorf("the orders before a login do not lead to the login form: %q", body)
	}
	resp, err := c.PostForm(srv.URL+"/login", url.Values{"user": {"demo"}, "password": {"wrong"}})
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	resp, err = c.PostForm(srv.URL+"/login", url.Values{"user": {"demo"}, "password": {"pw"}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/orders" || !strings.Contains(string(page), ">Export CSV</button>") || !strings.Contains(string(page), browserexport.Tracker) {
		t.Fatalf("after the login: %s %q", resp.Request.URL, page)
	}
	code, body := get("/api/orders")
	var d struct {
		Header []string   `json:"header"`
		Rows   [][]string `json:"rows"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != 200 || len(d.Rows) != 7 || d.Header[1] != "_sync_ts" {
		t.Errorf("rows: %d %v %q", code, err, body)
	}
}

// The specs decode strictly and pass the default policy: the run in one
// go with the demo's credentials, the session, and the run with a secret,
// whose password never travels in the spec.
func TestSpecs(t *testing.T) {
	p := limits.DefaultPolicy()
	p.AllowNetwork = true
	secret := browserexport.Login{User: "demo", Secret: "PARTNER_PASSWORD"}
	for name, js := range map[string][]byte{
		"spec":    browserexport.Spec("http://127.0.0.2:8766", browserexport.DemoLogin),
		"session": browserexport.SessionSpec(browserexport.DemoLogin),
		"secret":  browserexport.Spec("http://127.0.0.2:8766", secret),
	} {
		s, err := tasks.Decode(js)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.Prepare(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Limits.Processes != 256 || s.Limits.Profile != "browser" || !s.Network {
			t.Errorf("%s: limits %+v, network %v", name, s.Limits, s.Network)
		}
	}
	s, _ := tasks.Decode(browserexport.Spec("http://127.0.0.2:8766", secret))
	if env := s.Steps[0].Env["PARTNER_PASSWORD"]; env != "${secret:PARTNER_PASSWORD}" || len(s.Secrets) != 1 {
		t.Errorf("with a secret: env %q, secrets %v", env, s.Secrets)
	}
	for _, raw := range browserexport.SessionSteps("http://127.0.0.2:8766", browserexport.DemoLogin) {
		var st tasks.Step
		if err := tasks.DecodeStep(raw, &st); err != nil {
			t.Errorf("session step %s: %v", raw, err)
		}
	}
}
