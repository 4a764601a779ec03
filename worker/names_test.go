//go:build linux

package worker

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/record"
)

const namesSecret = "Tok-9f2Secret-Value"

func namesSet(t *testing.T) *secrets.Set {
	t.Helper()
	t.Setenv(secrets.EnvPrefix+"PARTNER_TOKEN", namesSecret)
	s, err := secrets.Source{}.Load([]string{"PARTNER_TOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// artifactsOf builds collected artifacts from name → content.
func artifactsOf(files map[string]string) *contract.Collected {
	c := &contract.Collected{Data: map[string][]byte{}}
	for n, d := range files {
		c.Artifacts = append(c.Artifacts, record.Artifact{Name: n, Bytes: int64(len(d))})
		c.Data[n] = []byte(d)
	}
	return c
}

// An artifact whose name holds a secret is staged under its redacted
// name, and the run is marked as leaking, naming the file as staged.
func TestScrubArtifactNames(t *testing.T) {
	s := namesSet(t)
	b64 := base64.RawURLEncoding.EncodeToString([]byte(namesSecret))
	c := checked{result: []byte(`{"ok": true}`), artifacts: artifactsOf(map[string]string{
		"out/" + namesSecret + ".txt": "plain",
		"out/b-" + b64:                "holds " + namesSecret,
		"out/clean.txt":               "clean",
	})}
	c.scrub(s)
	if c.verdict != "" {
		t.Fatalf("verdict %s: %s", c.verdict, c.msg)
	}
	var names []string
	for _, a := range c.artifacts.Artifacts {
		names = append(names, a.Name)
		if _, ok := c.artifacts.Data[a.Name]; !ok {
			t.Errorf("no data staged under %s", a.Name)
		}
	}
	want := []string{"out/[REDACTED].txt", "out/b-[REDACTED]", "out/clean.txt"}
	if strings.Join(names, "|") != strings.Join(want, "|") || len(c.artifacts.Data) != 3 {
		t.Errorf("artifacts %v (data %d), want %v", names, len(c.artifacts.Data), want)
	}
	if string(c.artifacts.Data["out/b-[REDACTED]"]) != "holds [REDACTED]" {
		t.Errorf("content: %q", c.artifacts.Data["out/b-[REDACTED]"])
	}
	if len(c.leaked) != 1 || c.leaked[0] != "PARTNER_TOKEN" {
		t.Errorf("leaked %v", c.leaked)
	}
	for _, w := range []string{"the name of out/[REDACTED].txt", "the name of out/b-[REDACTED]", "out/b-[REDACTED]"} {
		if !strings.Contains(c.leakedIn, w) {
			t.Errorf("leakedIn %q lacks %q", c.leakedIn, w)
		}
	}
	if strings.Contains(c.leakedIn, namesSecret) || strings.Contains(c.leakedIn, b64) {
		t.Errorf("leakedIn holds the secret: %q", c.leakedIn)
	}
}

// Two artifacts that redaction would give one name, and a result that it
// would give a key twice, break the contract.
func TestScrubCollisions(t *testing.T) {
	s := namesSet(t)
	c := checked{artifacts: artifactsOf(map[string]string{"out/" + namesSecret: "a", "out/[REDACTED]": "b"})}
	c.scrub(s)
	if c.verdict != record.VerdictOutput || !strings.Contains(c.msg, "two artifacts are named out/[REDACTED]") {
		t.Errorf("colliding names: verdict %q, %q", c.verdict, c.msg)
	}
	c = checked{result: []byte(`{"` + namesSecret + `": 1, "[REDACTED]": 2}`), artifacts: artifactsOf(nil)}
	c.scrub(s)
	if c.verdict != record.VerdictOutput || !strings.Contains(c.msg, `duplicate key "[REDACTED]" at /[REDACTED]`) {
		t.Errorf("colliding keys: verdict %q, %q", c.verdict, c.msg)
	}
}

// The record's names a step chose hold no secret once redacted: files,
// refused matches, artifacts, egress hosts (lower-cased by the proxy),
// decision reasons.
func TestRedactNames(t *testing.T) {
	s := namesSet(t)
	host := strings.ToLower(namesSecret) + ".exfil.example"
	rec := &record.Run{
		Files:     []record.File{{Path: "out/" + namesSecret}},
		Refused:   []record.File{{Path: "out/link-" + namesSecret}},
		Artifacts: []record.Artifact{{Name: "out/a-" + namesSecret}},
		Egress:    []record.Egress{{Host: host, Port: 443, Reason: host + " refused: not in the allow-list"}},
		Decision:  &record.Decision{Reasons: []string{"mentions " + namesSecret}},
	}
	redact(rec, s)
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	js := strings.ToLower(string(b))
	if strings.Contains(js, strings.ToLower(namesSecret)) {
		t.Errorf("the record holds the secret:\n%s", b)
	}
	if rec.Files[0].Path != "out/[REDACTED]" || rec.Egress[0].Host != "[REDACTED].exfil.example" || rec.Artifacts[0].Name != "out/a-[REDACTED]" {
		t.Errorf("redacted record:\n%s", b)
	}
}
