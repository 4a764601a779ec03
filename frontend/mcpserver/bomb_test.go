package mcpserver

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRunActionRefusesRegexBomb: a schema of 3,000 "a{1000}" patterns (84
// KB) is refused by run_action in both forms, naming the schema and the
// pattern past the bound, in milliseconds (before: ~2 GB per spec in a
// server that compiled it). The check is the client's (tasks.Spec.Prepare,
// contract.CheckSchema), which the fake client calls as the real one does.
func TestRunActionRefusesRegexBomb(t *testing.T) {
	props := map[string]any{}
	for i := range 3000 {
		props[fmt.Sprintf("p%04d", i)] = map[string]any{"pattern": "a{1000}"}
	}
	bomb, _ := json.Marshal(map[string]any{"properties": props})
	cs := connect(t, &fakeClient{}, Options{}, nil)
	for _, tc := range []struct{ args, field string }{
		{`{"spec": {"version": 1, "steps": [{"run": ["true"]}], "output": {"result": "out/r.json", "schema": ` + string(bomb) + `}}}`, "spec.output.schema"},
		{`{"command": "true", "output_result": "out/r.json", "output_schema": ` + string(bomb) + `}`, "output_schema"},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		res, out := callTool(t, cs, ToolRunAction, tc.args)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if !res.IsError || out["field"] != tc.field || !strings.Contains(fmt.Sprint(out["error"]), "#/properties/p0099/pattern") {
			t.Errorf("field %v, error %v; want %s naming #/properties/p0099/pattern", out["field"], out["error"], tc.field)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; took > 2*time.Second || alloc > 64<<20 {
			t.Errorf("refusing the bomb took %s and %d MiB", took, alloc>>20)
		}
	}
}
