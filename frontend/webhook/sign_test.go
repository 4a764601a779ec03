package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/testkit/testclock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// The Standard Webhooks specification's own test vector (its libraries'
// TestWebhookSign: github.com/standard-webhooks/standard-webhooks,
// libraries/go/webhook_test.go).
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specPayload   = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignKnownAnswer(t *testing.T) {
	key, err := ParseSecret(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	// fixed date: the Standard Webhooks test vector, signed at its own timestamp
	if got := Sign(key, specID, time.Unix(specTimestamp, 0), []byte(specPayload)); got != specSignature {
		t.Errorf("Sign = %s, want %s", got, specSignature)
	}
	h := http.Header{}
	h.Set(HeaderID, specID)
	h.Set(HeaderTimestamp, strconv.Itoa(specTimestamp))
	h.Set(HeaderSignature, specSignature)
	// fixed date: verified 30 s after the vector's timestamp, by the test's clock
	if err := verify(key, h, []byte(specPayload), time.Minute, time.Unix(specTimestamp+30, 0)); err != nil {
		t.Errorf("verify of the spec's vector: %v", err)
	}
}

// signed returns headers of body signed with secret at ts.
func signed(secret []byte, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, id, ts, body))
	return h
}

func TestVerify(t *testing.T) {
	key, _ := ParseSecret(specSecret)
	other, _ := ParseSecret(NewSecret())
	body := []byte(`{"type":"run.final","timestamp":"` + testclock.Epoch().Format(time.RFC3339) + `","data":{}}`)
	now := time.Now()
	for _, tc := range []struct {
		name    string
		secret  []byte
		headers http.Header
		body    []byte
		want    error
	}{
		{"valid", key, signed(key, "1-0", now, body), body, nil},
		{"tampered body", key, signed(key, "1-0", now, body), append([]byte(" "), body...), ErrSignature},
		{"wrong secret", other, signed(key, "1-0", now, body), body, ErrSignature},
		{"old timestamp", key, signed(key, "1-0", now.Add(-6*time.Minute), body), body, ErrTimestamp},
		{"future timestamp", key, signed(key, "1-0", now.Add(6*time.Minute), body), body, ErrTimestamp},
		{"other id", key, func() http.Header {
			h := signed(key, "1-0", now, body)
			h.Set(HeaderID, "2-0")
			return h
		}(), body, ErrSignature},
		{"other timestamp", key, func() http.Header {
			h := signed(key, "1-0", now, body)
			h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix()-1, 10))
			return h
		}(), body, ErrSignature},
		{"timestamp not a number", key, func() http.Header {
			h := signed(key, "1-0", now, body)
			h.Set(HeaderTimestamp, "soon")
			return h
		}(), body, ErrTimestamp},
		{"no signature", key, func() http.Header {
			h := signed(key, "1-0", now, body)
			h.Del(HeaderSignature)
			return h
		}(), body, ErrSignature},
		{"several signatures, one valid", key, func() http.Header {
			h := signed(key, "1-0", now, body)
			h.Set(HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,xyz "+h.Get(HeaderSignature)+" v1,!!")
			return h
		}(), body, nil},
		{"right MAC under another version", key, func() http.Header {
			h := signed(key, "1-0", now, body)
			h.Set(HeaderSignature, "v2"+strings.TrimPrefix(h.Get(HeaderSignature), "v1"))
			return h
		}(), body, ErrSignature},
	} {
		err := Verify(tc.secret, tc.headers, tc.body, 0)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A tolerance of its own: 6 minutes old passes within 10.
	if err := Verify(key, signed(key, "1-0", now.Add(-6*time.Minute), body), body, 10*time.Minute); err != nil {
		t.Errorf("Verify within a 10m tolerance: %v", err)
	}
}

func TestParseFlag(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(specSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad")
	if err := os.WriteFile(badFile, []byte("hunter2hunter2hunter2hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_TEST_WEBHOOK_SECRET", specSecret)
	key, _ := ParseSecret(specSecret)

	good := []struct {
		in   string
		want Endpoint
	}{
		{"https://hooks.example.com/in,secret=" + specSecret, Endpoint{URL: "https://hooks.example.com/in", Secret: key}},
		{"http://127.0.0.1:8080/h?x=1,secret_file=" + secretFile + ",events=run.final",
			Endpoint{URL: "http://127.0.0.1:8080/h?x=1", Secret: key, Events: []string{EventRunFinal}}},
		{"https://h.example/in,secret_env=AIRLOCK_TEST_WEBHOOK_SECRET,format=standard,events=approval.pending|run.final|run.final",
			Endpoint{URL: "https://h.example/in", Secret: key, Format: FormatStandard, Events: []string{EventApprovalPending, EventRunFinal}}},
		{"https://hooks.slack.com/services/T0/B0/XXXX,format=slack", Endpoint{URL: "https://hooks.slack.com/services/T0/B0/XXXX", Format: FormatSlack}},
	}
	for _, tc := range good {
		got, err := ParseFlag(tc.in)
		if err != nil {
			t.Errorf("ParseFlag(%q): %v", tc.in, err)
			continue
		}
		if got.URL != tc.want.URL || string(got.Secret) != string(tc.want.Secret) || got.Format != tc.want.Format ||
			strings.Join(got.Events, "|") != strings.Join(tc.want.Events, "|") {
			t.Errorf("ParseFlag(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}

	bad := []struct{ in, want string }{
		{"", "URL: empty"},
		{"ftp://h.example/x,secret=" + specSecret, `scheme "ftp"`},
		{"https:///nohost,secret=" + specSecret, "no host"},
		{"https://h.example/x", "a secret is required"},
		{"https://h.example/x,secret=hunter2", "secret: want whsec_"},
		{"https://h.example/x,secret=whsec_%%%", "secret: not valid base64"},
		{"https://h.example/x,secret=whsec_c2hvcnQ=", "secret: 5 bytes"},
		{"https://h.example/x,secret_file=" + filepath.Join(dir, "missing"), "secret_file:"},
		{"https://h.example/x,secret_file=" + badFile, "secret_file " + badFile + ": want whsec_"},
		{"https://h.example/x,secret_env=AIRLOCK_TEST_UNSET_VARIABLE", "secret_env: $AIRLOCK_TEST_UNSET_VARIABLE is not set"},
		{"https://h.example/x,secret=" + specSecret + ",secret_file=" + secretFile, "give one of"},
		{"https://h.example/x,secret=" + specSecret + ",format=teams", `format="teams"`},
		{"https://h.example/x,secret=" + specSecret + ",events=run.done", `events: "run.done"`},
		{"https://h.example/x,secret=" + specSecret + ",colour=blue", `unknown option "colour"`},
		{"https://h.example/x,secret=" + specSecret + ",format=slack,format=slack", "format= given twice"},
		{"https://h.example/a,b,secret=" + specSecret, `"b": want key=value`},
	}
	for _, tc := range bad {
		_, err := ParseFlag(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFlag(%q) = %v, want an error with %q", tc.in, err, tc.want)
			continue
		}
		// Neither the secret nor the URL's path is ever shown.
		for _, s := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "hunter2", "/x", "/a"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("ParseFlag(%q): error %q shows %q", tc.in, err, s)
			}
		}
	}
	if _, err := ParseSecret(NewSecret()); err != nil {
		t.Errorf("NewSecret does not parse: %v", err)
	}
	if err := checkEndpoints([]Endpoint{good[3].want, good[3].want}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("an endpoint listed twice: %v", err)
	}
}

func TestWants(t *testing.T) {
	for _, tc := range []struct {
		e       Endpoint
		pending bool
		final   bool
	}{
		{Endpoint{}, true, true},
		{Endpoint{Format: FormatSlack}, true, false},
		{Endpoint{Format: FormatSlack, Events: []string{EventRunFinal}}, false, true},
		{Endpoint{Events: []string{EventApprovalPending}}, true, false},
	} {
		if tc.e.Wants(EventApprovalPending) != tc.pending || tc.e.Wants(EventRunFinal) != tc.final {
			t.Errorf("%+v: Wants(pending, final) = %v, %v; want %v, %v", tc.e, tc.e.Wants(EventApprovalPending), tc.e.Wants(EventRunFinal), tc.pending, tc.final)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	var total time.Duration
	prev := time.Duration(0)
	for n := range DefaultMaxRetry {
		d := RetryDelay(n)
		if d < 4*time.Second || d > 15*time.Hour {
			t.Errorf("RetryDelay(%d) = %s", n, d)
		}
		if n < 6 && d <= prev {
			t.Errorf("RetryDelay(%d) = %s, not above RetryDelay(%d) = %s", n, d, n-1, prev)
		}
		prev = d
		total += d
	}
	if total < 30*time.Hour || total > 60*time.Hour {
		t.Errorf("%d retries span %s, want about 44h", DefaultMaxRetry, total)
	}
	f := retryDelayFunc(func(int) time.Duration { return time.Millisecond })
	if d := f(3, &statusError{code: 429, retryAfter: 7 * time.Second}, nil); d != 7*time.Second {
		t.Errorf("retry delay after a Retry-After of 7s: %s", d)
	}
	if d := f(3, &statusError{code: 500}, nil); d != time.Millisecond {
		t.Errorf("retry delay after a 500: %s", d)
	}
	now := testclock.Epoch()
	for in, want := range map[string]time.Duration{
		"": 0, "120": 2 * time.Minute, "junk": 0, "99999999": maxRetryAfter,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := retryAfter(in, now); got != want {
			t.Errorf("retryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSlackEscape(t *testing.T) {
	p := Pending{EventID: "1-0", RunID: "run<1>", TaskID: "t1", ApprovalID: "ap-1",
		Reasons:  []string{"rule big-amounts: /note is \"<!channel> & <https://evil.example|click>\""},
		Commands: commands("ap-1", "")}
	b, err := slackPending(p)
	if err != nil {
		t.Fatal(err)
	}
	var m SlackMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var mrk []string // every mrkdwn text: what Slack parses for markup
	mrk = append(mrk, m.Text)
	for _, bl := range m.Blocks {
		for _, f := range append(append([]SlackText{}, bl.Fields...), bl.Elements...) {
			mrk = append(mrk, f.Text)
		}
		if bl.Text != nil && bl.Text.Type == "mrkdwn" {
			mrk = append(mrk, bl.Text.Text)
		}
	}
	s := strings.Join(mrk, "\n")
	for _, bad := range []string{"<!channel>", "<https://evil", "run<1>"} {
		if strings.Contains(s, bad) {
			t.Errorf("slack mrkdwn holds %q unescaped: %s", bad, s)
		}
	}
	if !strings.Contains(s, `&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;`) || !strings.Contains(s, "run&lt;1&gt;") {
		t.Errorf("slack mrkdwn does not hold the escaped reason and run: %s", s)
	}
	long := strings.Repeat("é", 5000)
	p.Reasons = []string{long, long}
	for range 20 {
		p.Reasons = append(p.Reasons, "x")
	}
	if b, err = slackPending(p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "… and 12 more") {
		t.Errorf("22 reasons: the list is not cut at 10: %s", b)
	}
}

func TestCommands(t *testing.T) {
	c := commands("ap-1", "")
	if c.Accept != `approve accept ap-1 -by "$USER"` || c.Reject != `approve reject ap-1 -by "$USER" -comment "WHY"` || c.Show != "approve show ap-1" {
		t.Errorf("commands = %+v", c)
	}
	c = commands("ap-1", "team a:")
	if c.Show != "approve -prefix 'team a:' show ap-1" {
		t.Errorf("commands with a prefix = %+v", c)
	}
}

func TestDefaultQueue(t *testing.T) {
	for prefix, want := range map[string]string{"": DefaultQueue, "airlock:": DefaultQueue, "staging:": DefaultQueue + ":staging"} {
		if got := defaultQueue(prefix); got != want {
			t.Errorf("defaultQueue(%q) = %q, want %q", prefix, got, want)
		}
	}
}
