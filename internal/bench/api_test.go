//go:build linux

package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestAPISection runs the api section alone at a tiny size against a real
// worker and the real api binary: every figure is produced, the overhead
// is the difference of the p50s, the reads were answered, the targets are
// judged from the figures, and the table and the JSON say so. It asserts
// no speed.
func TestAPISection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/api and runs a real worker for a few seconds; not with -short")
	}
	rep, table := runTiny(t, 4*time.Minute, []string{SecAPI})
	a := rep.API
	if a == nil || a.Runs != 20 || a.Readers != apiReaders || a.Queues < 1 {
		t.Fatalf("api report: %+v", a)
	}
	if rep.Latency != nil || rep.Session != nil || rep.Throughput != nil {
		t.Errorf("other sections ran: %+v", rep)
	}
	for name, st := range map[string]Stat{"HTTP p50": a.HTTPP50, "HTTP p99": a.HTTPP99, "Go p50": a.GoP50, "Go p99": a.GoP99,
		"enqueue HTTP": a.EnqueueHTTPP50, "enqueue Go": a.EnqueueGoP50, "reads/s": a.ReadsPerSec, "read p50": a.ReadP50,
		"reads/s with ?queue=": a.ReadsQueuePerSec, "read p50 with ?queue=": a.ReadQueueP50} {
		if len(st.Samples) != 1 || st.Median <= 0 {
			t.Errorf("%s: %+v, want one positive sample", name, st)
		}
	}
	if d := a.HTTPP50.Median - a.GoP50.Median - a.OverheadP50.Median; d > 1e-9 || d < -1e-9 {
		t.Errorf("overhead %v, want HTTP p50 %v − Go p50 %v", a.OverheadP50.Median, a.HTTPP50.Median, a.GoP50.Median)
	}
	if a.EnqueueHTTPP50.Median >= a.HTTPP50.Median || a.EnqueueGoP50.Median >= a.GoP50.Median || a.HTTPP50.Median > a.HTTPP99.Median {
		t.Errorf("the enqueue alone is not part of the run, or p50 > p99: %+v", a)
	}
	if a.OverheadMet != (a.OverheadP50.Median <= TargetAPIOverheadMS) || a.ReadsMet != (a.ReadsPerSec.Median >= TargetAPIReadsPerSec) {
		t.Errorf("targets judged %v %v from %v ms and %v/s", a.OverheadMet, a.ReadsMet, a.OverheadP50.Median, a.ReadsPerSec.Median)
	}
	for _, want := range []string{"HTTP API over the Go client", "enqueue → record p50", "≤ 1 ms", "GET /v1/runs/{id} of a finished run", "≥ 2000", "with ?queue="} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		API *APIReport `json:"api"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.API == nil || back.API.ReadsPerSec.Median != a.ReadsPerSec.Median {
		t.Errorf("JSON: %v, %+v", err, back.API)
	}
}
