//go:build linux

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWorkspaceTimesFresh (issue 31, round 4): the times a task sets on
// its workspace directory with touch (an access time ten years ahead, a
// modification time ten years back) are not what the next task on the
// same slot reads: it sees times of its own start.
func TestWorkspaceTimesFresh(t *testing.T) {
	t.Parallel()
	b := setup(t, "-concurrency", "1")
	rec1 := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c",
		"now=$(date +%s); touch -a -d @$((now + 315360000)) /workspace && touch -m -d @$((now - 315360000)) /workspace && stat -c '%X %Y' /workspace"]}]}`)
	if st := stepOf(t, rec1, 0); st.Stdout == "" || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Fatalf("task 1 could not set its workspace's times:\n%s", mustJSON(t, rec1))
	}
	before := time.Now().Add(-2 * time.Second)
	rec2 := b.run(`{"version": 1, "steps": [{"run": ["stat", "-c", "%X %Y %Z", "/workspace", "/workspace/in", "/workspace/out", "/workspace/tmp"]}]}`)
	after := time.Now().Add(2 * time.Second)
	if rec1.Isolation.UID != rec2.Isolation.UID {
		t.Fatalf("the tasks ran on different slots: uid %d and %d", rec1.Isolation.UID, rec2.Isolation.UID)
	}
	out := stepOf(t, rec2, 0).Stdout
	fields := strings.Fields(out)
	if len(fields) != 12 {
		t.Fatalf("stat in task 2: %q", out)
	}
	for i, f := range fields {
		sec, err := strconv.ParseInt(f, 10, 64)
		if err != nil || sec < before.Unix() || sec > after.Unix() {
			t.Errorf("time %d of task 2's workspace (%q): %s, want between %d and %d (task 1 set %q)", i, out, f, before.Unix(), after.Unix(), stepOf(t, rec1, 0).Stdout)
		}
	}
}

// TestProcLoadavgMasked (issue 31, round 4): a step reads a constant in
// /proc/loadavg, not the host's load averages and count of tasks.
func TestProcLoadavgMasked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["cat", "/proc/loadavg"]}]}`)
	if got, want := stepOf(t, rec, 0).Stdout, "0.00 0.00 0.00 1/1 1\n"; got != want {
		t.Errorf("/proc/loadavg in a step: %q, want %q", got, want)
	}
}
