package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/frontend/httpapi"
)

// TestEnqueueRefusesRegexBomb: POST /v1/runs with a schema of 3,000
// "a{1000}" patterns (84 KB) is a 400 naming output.schema and the pattern
// past the bound, three times in a row without the server's memory
// growing (before: 2 GB after three POSTs). The check is the client's
// (tasks.Spec.Prepare, contract.CheckSchema), as at enqueue and in the
// worker.
func TestEnqueueRefusesRegexBomb(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	props := map[string]any{}
	for i := range 3000 {
		props[fmt.Sprintf("p%04d", i)] = map[string]any{"pattern": "a{1000}"}
	}
	body, _ := json.Marshal(map[string]any{"version": 1, "steps": []any{map[string]any{"run": []string{"true"}}},
		"output": map[string]any{"result": "out/r.json", "schema": map[string]any{"properties": props}}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range 3 {
		p := e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: string(body)}).problem(t, http.StatusBadRequest)
		if p.Field != "output.schema" || p.Type != httpapi.ProblemSpecRejected || !strings.Contains(p.Detail, "#/properties/p0099/pattern") {
			t.Errorf("problem %+v, want output.schema naming #/properties/p0099/pattern", p)
		}
	}
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	// Memory is the bound that matters (2 GB before); the time bound only
	// catches a return of the blow-up, loose enough for -race on a busy
	// machine (3.1 s seen in CI).
	if alloc := after.TotalAlloc - before.TotalAlloc; took > 15*time.Second || alloc > 128<<20 {
		t.Errorf("three POSTs of the bomb took %s and allocated %d MiB", took, alloc>>20)
	}
	t.Logf("three POSTs of %d bytes: %s, %d MiB allocated", len(body), took, (after.TotalAlloc-before.TotalAlloc)>>20)
}
