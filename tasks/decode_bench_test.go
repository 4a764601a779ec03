package tasks_test

import (
	"testing"

	"github.com/airlock-run/airlock/tasks"
)

// BenchmarkDecode decodes a spec like the script workload's: the worker
// does it once per task.
func BenchmarkDecode(b *testing.B) {
	payload := []byte(`{"version":1,"run_id":"bench-run-1","queue":"default","files":{"gen.sh":"set -eu\ncat > out/result.json <<'EOF'\n{\"rows\": 3}\nEOF\n"},"steps":[{"name":"gen","run":["sh","gen.sh"],"env":{"A":"1"}}],"output":{"result":"out/result.json","schema":{"type":"object","properties":{"rows":{"type":"integer"}},"required":["rows"]}},"timeout":"30s","limits":{"memory":"256MiB"}}`)
	if _, err := tasks.Decode(payload); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tasks.Decode(payload); err != nil {
			b.Fatal(err)
		}
	}
}
