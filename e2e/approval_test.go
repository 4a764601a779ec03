//go:build linux

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/record"
	"github.com/google/go-cmp/cmp"
)

// reportSpec writes a JSON result and a CSV artifact; result is the JSON
// text the step writes, extra more top-level fields ending with a comma.
func reportSpec(result, extra string) string {
	script, _ := json.Marshal("printf '%s' '" + result + "' > out/result.json; printf 'a,b\\n1,2\\n' > out/report.csv; echo noise > out/skip.txt")
	return `{"version": 1,` + extra + `
		"files": {"gen.sh": ` + string(script) + `},
		"steps": [{"run": ["sh", "gen.sh"]}],
		"output": {"result": "out/result.json",
		           "schema": {"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}}},
		           "artifacts": ["out/*.csv"]}}`
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func (b *bundle) waitFinal(taskID string) *record.Run {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := b.client.WaitFinal(ctx, b.queue, taskID)
	if err != nil {
		b.t.Fatalf("wait final: %v\nworker logs:\n%s", err, b.worker.logs.String())
	}
	return rec
}

func TestParkAcceptPromote(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, "-store", store)
	e, err := b.client.Enqueue(context.Background(), b.spec(reportSpec(`{"total": 42}`, `"run_id": "report-1",`)))
	if err != nil {
		t.Fatal(err)
	}
	rec := b.wait(e.TaskID)
	if rec.State != record.StateParked || rec.ApprovalID == "" || rec.Decision == nil || rec.Decision.Action != "park" {
		t.Fatalf("want parked:\n%s", mustJSON(t, rec))
	}
	if rec.ResultSHA256 != sha(`{"total": 42}`) || len(rec.Artifacts) != 1 || rec.Artifacts[0].Name != "out/report.csv" || rec.Artifacts[0].SHA256 != sha("a,b\n1,2\n") {
		t.Fatalf("output in record:\n%s", mustJSON(t, rec))
	}
	if _, err := os.Stat(filepath.Join(store, "report-1")); !os.IsNotExist(err) {
		t.Fatal("a parked run published something")
	}
	code, stdout, stderr := b.approveCLI("accept", rec.ApprovalID, "-by", "alice", "-comment", "lgtm")
	if code != 0 {
		t.Fatalf("accept: exit %d\n%s%s", code, stdout, stderr)
	}
	final := b.waitFinal(e.TaskID)
	if final.State != record.StatePromoted || final.DecidedBy != "alice" {
		t.Fatalf("want promoted by alice:\n%s", mustJSON(t, final))
	}
	dir := filepath.Join(store, "report-1", e.TaskID)
	got := map[string]string{}
	for _, n := range []string{"result.json", "out/report.csv"} {
		bs, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		got[n] = string(bs)
	}
	if diff := cmp.Diff(map[string]string{"result.json": `{"total": 42}`, "out/report.csv": "a,b\n1,2\n"}, got); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	var m approve.Manifest
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || json.Unmarshal(mb, &m) != nil {
		t.Fatalf("manifest: %v %s", err, mb)
	}
	if m.ApprovalID != rec.ApprovalID || m.AcceptedBy != "alice" || m.TaskID != e.TaskID || len(m.Run.Steps) != 1 || m.Artifacts[0].SHA256 != sha("a,b\n1,2\n") {
		t.Errorf("manifest: %s", mb)
	}
	// A second approver is told who was first.
	code, _, stderr = b.approveCLI("accept", rec.ApprovalID, "-by", "bob")
	if code != 4 || !strings.Contains(stderr, "alice") {
		t.Errorf("second accept: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := b.approveCLI("show", "ap-000000000000"); code != 3 {
		t.Errorf("show of an unknown approval: exit %d, want 3", code)
	}
}

func TestSchemaViolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(reportSpec(`{"total": "many"}`, ""))
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictSchema || len(rec.SchemaErrors) == 0 {
		t.Fatalf("want schema failure:\n%s", mustJSON(t, rec))
	}
	if !strings.Contains(rec.SchemaErrors[0].Path+rec.SchemaErrors[0].Message, "total") || rec.ApprovalID != "" {
		t.Errorf("schema errors: %s", mustJSON(t, rec.SchemaErrors))
	}
	// A result that is a symlink is refused, never followed.
	rec = b.run(`{"version": 1, "steps": [{"run": ["ln", "-s", "/etc/passwd", "out/result.json"]}], "output": {"result": "out/result.json"}}`)
	if rec.Verdict != record.VerdictOutput || strings.Contains(mustJSON(t, rec), "root:x:0") {
		t.Fatalf("want output verdict:\n%s", mustJSON(t, rec))
	}
}

func writePolicy(t *testing.T, js string) string {
	p := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAutoPromoteAndStricterSpec(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	pol := writePolicy(t, `{"default": "promote", "rules": [{"name": "big-total", "when": {"result": {"pointer": "/total", "op": ">", "value": 1000}}, "then": "park"}]}`)
	b := setup(t, "-store", store, "-policy", pol)
	rec := b.run(reportSpec(`{"total": 7}`, `"run_id": "auto-1",`))
	if rec.State != record.StatePromoted || rec.DecidedBy != "policy:default" || rec.PublishedTo != filepath.Join(store, "auto-1", rec.TaskID) {
		t.Fatalf("want promoted by policy:\n%s", mustJSON(t, rec))
	}
	// The manifest's run summary says what the record says of the
	// workspace (it once said used_bytes 0: copied before it was measured).
	var m approve.Manifest
	mb, err := os.ReadFile(filepath.Join(store, "auto-1", rec.TaskID, "manifest.json"))
	if err != nil || json.Unmarshal(mb, &m) != nil {
		t.Fatalf("manifest: %v %s", err, mb)
	}
	if m.Run.Workspace != rec.Workspace || m.Run.Workspace.UsedBytes <= 0 || m.Run.Workspace.InputBytes <= 0 {
		t.Errorf("manifest's workspace %+v, the record's %+v: want the same, used and input bytes above 0", m.Run.Workspace, rec.Workspace)
	}
	rec = b.run(reportSpec(`{"total": 5000}`, ""))
	if rec.State != record.StateParked || !strings.Contains(strings.Join(rec.Decision.Reasons, " "), "big-total") {
		t.Fatalf("want parked by rule big-total:\n%s", mustJSON(t, rec))
	}
	rec = b.run(reportSpec(`{"total": 7}`, `"approval": "always",`))
	if rec.State != record.StateParked {
		t.Fatalf("approval always must park despite a promote policy:\n%s", mustJSON(t, rec))
	}
	// enqueue -wait=final follows an auto-promoted run to the end.
	code, stdout, stderr := b.enqueueCLI(reportSpec(`{"total": 1}`, ""), "-queue", b.queue, "-wait=final", "-")
	var got record.Run
	if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.State != record.StatePromoted {
		t.Fatalf("enqueue -wait=final: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
}

func TestRejectAndExpire(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, "-store", store, "-approval-ttl", "2s", "-sweep-interval", "200ms")
	rec := b.run(reportSpec(`{"total": 1}`, `"run_id": "rej-1",`))
	if code, _, stderr := b.approveCLI("reject", rec.ApprovalID, "-by", "carol"); code != 2 || !strings.Contains(stderr, "comment") {
		t.Errorf("reject without a comment: exit %d, stderr %q", code, stderr)
	}
	if code, out, stderr := b.approveCLI("reject", rec.ApprovalID, "-by", "carol", "-comment", "wrong totals"); code != 0 {
		t.Fatalf("reject: exit %d %s %s", code, out, stderr)
	}
	if final := b.waitFinal(rec.TaskID); final.State != record.StateRejected || final.DecidedBy != "carol" {
		t.Fatalf("want rejected:\n%s", mustJSON(t, final))
	}
	rec = b.run(reportSpec(`{"total": 2}`, `"run_id": "exp-1",`))
	if final := b.waitFinal(rec.TaskID); final.State != record.StateExpired {
		t.Fatalf("want expired:\n%s", mustJSON(t, final))
	}
	if code, _, stderr := b.approveCLI("accept", rec.ApprovalID, "-by", "dave"); code != 4 || !strings.Contains(stderr, "expired") {
		t.Errorf("accept after expiry: exit %d, stderr %q", code, stderr)
	}
	for _, run := range []string{"rej-1", "exp-1"} {
		if _, err := os.Stat(filepath.Join(store, run)); !os.IsNotExist(err) {
			t.Errorf("%s was published", run)
		}
	}
	code, out, _ := b.approveCLI("history", rec.ApprovalID)
	if code != 0 || !strings.Contains(out, "expired") {
		t.Errorf("history: exit %d\n%s", code, out)
	}
}
