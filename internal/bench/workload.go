//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-run/airlock/tasks"
)

// workload is one kind of task, the same spec for both systems.
type workload struct {
	name  string
	label string
	cpu   bool // CPU-bound: fewer tasks per run
	// result: its tasks write a result, which Airlock validates and
	// publishes and the durable baseline writes to a file.
	result bool
	spec   func(queue, runID string) *tasks.Spec
}

func (h *harness) workloads() []workload {
	script := "small script"
	if outputSupport {
		script += ": 1 KiB result, schema, auto-promoted"
	} else {
		script += " (no output contract in this build)"
	}
	all := []workload{
		{name: "trivial", label: "trivial: /bin/true", spec: trivialSpec},
		{name: "script", label: script, spec: scriptSpec, result: outputSupport},
		{name: "cpu", label: fmt.Sprintf("CPU-bound: ~50 ms sh loop (%d iterations)", h.cpuN), cpu: true,
			spec: func(q, id string) *tasks.Spec { return cpuSpec(q, id, h.cpuN) }},
	}
	return slices.DeleteFunc(all, func(w workload) bool { return !slices.Contains(h.opt.Workloads, w.name) })
}

// AllWorkloads names the workloads of the throughput runs.
var AllWorkloads = []string{"trivial", "script", "cpu"}

func (h *harness) tasksFor(wl workload) int {
	if wl.cpu {
		return h.sz.ThroughputCPU
	}
	return h.sz.Throughput
}

func trivialSpec(queue, runID string) *tasks.Spec {
	return &tasks.Spec{Version: 1, RunID: runID, Queue: queue,
		Steps: []tasks.Step{{Name: "true", Run: []string{"/bin/true"}}}}
}

// ResultJSON is the 1 KiB result the script workload writes, and
// ResultSchema the schema it is validated against.
var ResultJSON, ResultSchema = resultDoc()

func resultDoc() (string, string) {
	type item struct {
		N    int    `json:"n"`
		Name string `json:"name"`
		OK   bool   `json:"ok"`
	}
	doc := struct {
		ID    string `json:"id"`
		Items []item `json:"items"`
	}{ID: "bench"}
	for i := 0; ; i++ {
		doc.Items = append(doc.Items, item{N: i, Name: fmt.Sprintf("item-%03d", i), OK: i%2 == 0})
		if b, _ := json.Marshal(doc); len(b) >= 1000 {
			break
		}
	}
	b, _ := json.Marshal(doc)
	schema := `{"type":"object","required":["id","items"],"additionalProperties":false,` +
		`"properties":{"id":{"type":"string","minLength":1},"items":{"type":"array","maxItems":100,` +
		`"items":{"type":"object","required":["n","name","ok"],"properties":{"n":{"type":"integer","minimum":0},` +
		`"name":{"type":"string","pattern":"^item-[0-9]+$"},"ok":{"type":"boolean"}}}}}}`
	return string(b), schema
}

// scriptSh writes ResultJSON to out/result.json.
var scriptSh = "set -eu\ncat > out/result.json <<'EOF'\n" + ResultJSON + "\nEOF\n"

func scriptSpec(queue, runID string) *tasks.Spec {
	s := &tasks.Spec{Version: 1, RunID: runID, Queue: queue,
		Files: map[string]tasks.File{"gen.sh": tasks.File(scriptSh)},
		Steps: []tasks.Step{{Name: "gen", Run: []string{"sh", "gen.sh"}}}}
	if outputSupport {
		s.Output = &tasks.Output{Result: "out/result.json", Schema: json.RawMessage(ResultSchema)}
	}
	return s
}

func cpuLoop(n int) []string {
	return []string{"sh", "-c", "i=0; while [ $i -lt " + strconv.Itoa(n) + " ]; do i=$((i+1)); done"}
}

func cpuSpec(queue, runID string, n int) *tasks.Spec {
	return &tasks.Spec{Version: 1, RunID: runID, Queue: queue,
		Steps: []tasks.Step{{Name: "spin", Run: cpuLoop(n)}}}
}

// calibrateCPU finds the loop count that takes about 50 ms of CPU in a bare
// exec here, and returns it with the CPU time of one run at that count.
func calibrateCPU(ctx context.Context) (int, float64, error) {
	const target = 50.0 // ms
	n := 20000
	for range 6 {
		ms, err := medianCPU(ctx, n, 5)
		if err != nil {
			return 0, 0, err
		}
		if ms > 0 && (ms > 0.9*target && ms < 1.1*target) {
			return n, ms, nil
		}
		if ms <= 0 {
			n *= 10
			continue
		}
		n = max(100, int(float64(n)*target/ms))
	}
	ms, err := medianCPU(ctx, n, 5)
	return n, ms, err
}

// medianCPU is the median CPU time (user+sys) of k bare runs of the loop.
func medianCPU(ctx context.Context, n, k int) (float64, error) {
	var xs []float64
	for range k {
		cmd := exec.CommandContext(ctx, cpuLoop(n)[0], cpuLoop(n)[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, out)
		}
		ps := cmd.ProcessState
		xs = append(xs, float64((ps.UserTime()+ps.SystemTime())/time.Microsecond)/1000)
	}
	slices.Sort(xs)
	return xs[len(xs)/2], nil
}
