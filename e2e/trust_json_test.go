//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// TestTrustJSONDuplicateKeys: a result that says the amount twice
// (5000000 first, as other readers see it; 5 last, as the schema's
// validator and the policy would) fails with the output verdict naming
// /amount, under a policy that promotes everything: nothing is parked or
// published. A spec with a key twice is refused at enqueue and by the
// worker, naming the field.
func TestTrustJSONDuplicateKeys(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, "-store", store, "-policy", writePolicy(t, `{"default": "promote", "rules": [
		{"name": "big-amount", "when": {"result": {"pointer": "/amount", "op": ">", "value": 1000}}, "then": "park"}]}`))
	spec := func(result string) string {
		script, _ := json.Marshal("printf '%s' '" + result + "' > out/result.json")
		return `{"version": 1, "files": {"gen.sh": ` + string(script) + `}, "steps": [{"run": ["sh", "gen.sh"]}],
			"output": {"result": "out/result.json", "schema": {"type": "object", "properties": {"amount": {"type": "number", "maximum": 1000}}}}}`
	}
	var failed []string // their run ids
	for _, tc := range []struct{ result, ptr string }{
		{`{"amount": 5000000, "amount": 5}`, "/amount"},
		{`{"items": [{"amount": 1}, {"amount": 5000000, "note": "x", "amount": 5}]}`, "/items/1/amount"},
		{`{"amount": 5000000, "\u0061mount": 5}`, "/amount"},
	} {
		rec := b.run(spec(tc.result))
		if rec.State != record.StateFailed || rec.Verdict != record.VerdictOutput ||
			!strings.Contains(rec.Error, `duplicate key "amount" at `+tc.ptr) || !strings.Contains(rec.Error, "output.result") {
			t.Errorf("result %s: want failed, verdict output naming %s:\n%s", tc.result, tc.ptr, mustJSON(t, rec))
		}
		failed = append(failed, rec.RunID)
		if rec.ApprovalID != "" || rec.Decision != nil || rec.PublishedTo != "" {
			t.Errorf("result %s: parked or promoted:\n%s", tc.result, mustJSON(t, rec))
		}
	}
	// The same result without the duplicate: the policy's rule parks it,
	// which proves the rule would have seen the amount.
	if rec := b.run(spec(`{"amount": 5000000}`)); rec.Verdict != record.VerdictSchema {
		t.Errorf("a single amount above the maximum: want the schema verdict:\n%s", mustJSON(t, rec))
	}
	if rec := b.run(spec(`{"amount": 5}`)); rec.State != record.StatePromoted {
		t.Errorf("a single small amount: want promoted:\n%s", mustJSON(t, rec))
	}
	for _, id := range failed {
		if _, err := os.Stat(filepath.Join(store, id)); !os.IsNotExist(err) {
			t.Errorf("run %s was published (%v)", id, err)
		}
	}

	// A spec with a key twice: refused at enqueue naming the field...
	dup := `{"version": 1, "queue": "` + b.queue + `", "steps": [{"run": ["sh", "-c", "echo $X"], "env": {"X": "safe", "X": "other"}}]}`
	if code, _, stderr := b.enqueueCLI(dup, "-"); code != 2 || !strings.Contains(stderr, "steps[0].env") || !strings.Contains(stderr, `duplicate key "X"`) {
		t.Errorf("enqueue of a spec with a key twice: exit %d, stderr %q", code, stderr)
	}
	// ...and, past the client, by the worker.
	rec := b.runRaw(dup)
	if rec.State != record.StateFailed || !strings.Contains(rec.Error, "steps[0].env") || !strings.Contains(rec.Error, `duplicate key "X"`) || len(rec.Steps) != 0 {
		t.Errorf("a raw spec with a key twice:\n%s", mustJSON(t, rec))
	}
}
