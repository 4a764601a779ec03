package actions_test

import (
	"encoding/json"
	"testing"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// BenchmarkExpand is the worker's cost of a call: the csv-report
// definition expanded with its params and prepared.
func BenchmarkExpand(b *testing.B) {
	c, err := actions.LoadDir("../examples/csv-report/actions", limits.DefaultPolicy())
	if err != nil {
		b.Fatal(err)
	}
	d, _ := c.Lookup("csv-report")
	call := &tasks.Spec{Version: 1, Action: "csv-report", Params: json.RawMessage(`{"day": "2026-12-05"}`)}
	if err := call.Prepare(limits.DefaultPolicy()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Expand(call, limits.DefaultPolicy()); err != nil {
			b.Fatal(err)
		}
	}
}
