//go:build linux

package e2e

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// TestFileModeExecutable: a spec's file given "mode": "0755" is a program
// the step runs as ./run.sh in strict isolation (as the slot's uid, in the
// step's own root); the same file without a mode is written 0600, and its
// exec fails with a record error that says how to fix it.
func TestFileModeExecutable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1,
		"files": {"run.sh": {"text": "#!/bin/sh\necho \"run.sh as $(id -u)\"\nstat -c %a run.sh bin/tool data.txt\n./bin/tool\n", "mode": "0755"},
			"bin/tool": {"base64": "IyEvYmluL3NoCmVjaG8gdG9vbAo=", "mode": "700"},
			"data.txt": "plain"},
		"steps": [{"run": ["./run.sh"]}]}`)
	st := stepOf(t, rec, 0)
	want := "755\n700\n600\ntool\n"
	if rec.State != record.StateCompleted || st.Verdict != record.VerdictOK || !strings.HasPrefix(st.Stdout, "run.sh as ") || !strings.HasSuffix(st.Stdout, want) {
		t.Fatalf("want completed/ok and stdout ending %q:\n%s", want, mustJSON(t, rec))
	}
	if strings.HasPrefix(st.Stdout, "run.sh as 0\n") {
		t.Errorf("the step ran as root: %q", st.Stdout)
	}
	checkClean(t, rec)

	rec = b.run(`{"version": 1, "files": {"run.sh": "#!/bin/sh\necho never\n"}, "steps": [{"run": ["./run.sh"]}]}`)
	st = stepOf(t, rec, 0)
	if rec.State != record.StateFailed || st.Verdict != record.VerdictExecError ||
		!strings.Contains(st.Error, "permission denied") || !strings.Contains(st.Error, `files["run.sh"] is written 0600`) ||
		!strings.Contains(st.Error, `"mode": "0755"`) {
		t.Fatalf("want failed/exec_error with a hint naming files[\"run.sh\"] and \"mode\": \"0755\":\n%s", mustJSON(t, rec))
	}
}
