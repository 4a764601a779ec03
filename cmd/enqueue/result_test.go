package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// TestResultStore: -result reads where the run's record says; -store reads
// in the store given instead (the workers' store as seen from here), and
// without it a record pointing where this process sees nothing exits 3
// with a hint naming -store.
func TestResultStore(t *testing.T) {
	t.Parallel()
	q, store := redistest.Queue(t), t.TempDir()
	announce(t, q)
	// Published where the worker sees its store, which this process does
	// not (another machine, a container's volume).
	redistest.ServePromoted(t, q, store, func(_, runID, taskID string) string {
		return filepath.Join("/nonexistent/store", runID, taskID)
	})
	got := enqueueCmd(t, `{"version": 1, "run_id": "r1", "steps": [{"run": ["true"]}]}`, "", "-queue", q, "-wait", "-wait-timeout", "20s")
	var rec record.Run
	if got.Code != 0 || json.Unmarshal([]byte(got.Stdout), &rec) != nil {
		t.Fatalf("enqueue -wait: %+v", got)
	}
	url := redistest.URL(t)
	got = runArgs(t, "", "-redis", url, "-result", rec.TaskID)
	if got.Code != exitNotYet || !strings.HasPrefix(got.Stderr, "enqueue: airlock: task "+rec.TaskID+": /nonexistent/store/r1/"+rec.TaskID+" holds no manifest: ") ||
		!strings.HasSuffix(got.Stderr, "; if this process sees the workers' store elsewhere, say where (-store of enqueue, api or mcp; ClientOptions.Store)\n") {
		t.Errorf("-result without -store: %+v", got)
	}
	got = runArgs(t, "", "-redis", url, "-result", rec.TaskID, "-store", store)
	var pub struct{ Where string }
	if got.Code != 0 || json.Unmarshal([]byte(got.Stdout), &pub) != nil || pub.Where != filepath.Join(store, "r1", rec.TaskID) {
		t.Errorf("-result -store %s: %+v", store, got)
	}
}
