// Package browserexport is the seed article's worked example as it is
// written: a browser agent logs in to a partner's back-office, clicks the
// export of a day's orders (a CSV the page's JavaScript builds, so a plain
// GET cannot fetch it), and the csv-report clean drops the parasitic
// columns and computes two indicators; the result is validated and parked.
//
// It holds the partner (Partner: a login form, an orders page with an
// "Export CSV" button), the Playwright script that drives Debian's chromium
// (browse.js), and the spec of the run, in one go (Spec) or as a session
// (SessionSpec and SessionSteps). `go run ./examples/browser-export/partner`
// serves the partner and prints the spec (-print-spec).
package browserexport

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"

	_ "embed"

	csvreport "github.com/airlock-run/airlock/examples/csv-report"
)

//go:embed browse.js
var browseJS string

// The demo's credentials: they travel in the spec, so that -print-spec
// alone makes a runnable example on a worker that holds no secret.
const (
	DemoUser     = "demo"
	DemoPassword = "airlock-demo"
)

// PlaywrightDir is where README installs playwright-core
// (npm install --prefix /opt/airlock-browser playwright-core), added to
// the steps' view with `worker -ro-bind /opt/airlock-browser`.
const PlaywrightDir = "/opt/airlock-browser"

// Tracker is the third-party address the orders page calls as it loads
// (an analytics beacon, as back-offices have): an address no operator
// opens, so the record's egress lists its refusal.
const Tracker = "http://analytics.partner.invalid/collect"

// Partner is the partner's back-office: GET / is a login form; POST /login
// with User and Password sets a session cookie; GET /orders (logged in)
// shows the day's orders and an "Export CSV" button whose click builds the
// CSV in the page from GET /api/orders (logged in; JSON rows).
type Partner struct {
	User, Password string
	Rows           int

	mu       sync.Mutex
	sessions map[string]bool
}

// ServeHTTP implements http.Handler.
func (p *Partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/" && r.Method == http.MethodGet:
		page(w, loginPage)
	case r.URL.Path == "/login" && r.Method == http.MethodPost:
		p.login(w, r)
	case r.URL.Path == "/orders" && r.Method == http.MethodGet:
		if !p.loggedIn(r) {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		page(w, bytes.ReplaceAll(ordersPage, []byte("TRACKER"), []byte(Tracker)))
	case r.URL.Path == "/api/orders" && r.Method == http.MethodGet:
		if !p.loggedIn(r) {
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		p.orders(w)
	default:
		http.NotFound(w, r)
	}
}

func page(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

func (p *Partner) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	user, pass := r.PostFormValue("user"), r.PostFormValue("password")
	okUser := subtle.ConstantTimeCompare([]byte(user), []byte(p.User))
	okPass := subtle.ConstantTimeCompare([]byte(pass), []byte(p.Password))
	if okUser&okPass != 1 || p.Password == "" {
		w.WriteHeader(http.StatusUnauthorized)
		page(w, bytes.Replace(loginPage, []byte("<!--error-->"), []byte(`<p id="error">Wrong user or password.</p>`), 1))
		return
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	p.mu.Lock()
	if p.sessions == nil {
		p.sessions = map[string]bool{}
	}
	p.sessions[id] = true
	p.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: "session", Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/orders", http.StatusSeeOther)
}

func (p *Partner) loggedIn(r *http.Request) bool {
	c, err := r.Cookie("session")
	if err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[c.Value]
}

// orders answers the export's rows as JSON: {"header": [...], "rows": [[...]]}.
func (p *Partner) orders(w http.ResponseWriter) {
	var b bytes.Buffer
	csvreport.WriteExport(&b, p.Rows)
	all, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"header": all[0], "rows": all[1:]})
}

var loginPage = []byte(`<!doctype html>
<html><head><title>Partner back-office</title></head><body>
<h1>Partner back-office</h1>
<!--error-->
<form method="post" action="/login">
<label>User <input name="user" autocomplete="username"></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Log in</button>
</form>
</body></html>
`)

var ordersPage = []byte(`<!doctype html>
<html><head><title>Orders</title></head><body>
<h1>Orders of 2026-12-05</h1>
<p id="summary">Loading the orders…</p>
<p id="analytics">Analytics: sending…</p>
<button id="export">Export CSV</button>
<script>
fetch("/api/orders").then(r => r.json()).then(d => {
  document.getElementById("summary").textContent = d.rows.length + " orders, columns: " + d.header.join(", ");
});
fetch("TRACKER", {method: "POST", body: "page=orders"})
  .then(() => { document.getElementById("analytics").textContent = "Analytics: sent"; })
  .catch(() => { document.getElementById("analytics").textContent = "Analytics: blocked"; });
document.getElementById("export").addEventListener("click", async () => {
  const d = await (await fetch("/api/orders")).json();
  const q = v => /[",\n]/.test(v) ? '"' + v.replaceAll('"', '""') + '"' : v;
  const text = [d.header, ...d.rows].map(r => r.map(q).join(",")).join("\n") + "\n";
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type: "text/csv"}));
  a.download = "export-2026-12-05.csv";
  document.body.appendChild(a);
  a.click();
});
</script>
</body></html>
`)
