//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// The regular expressions of a schema, against the worker: a pattern
// costed by its program size times the string it runs on, "format": "regex"
// parsed and never compiled, validations too costly for the worker run in
// a confined child killed at the task's deadline, compile bombs refused at
// enqueue, and a worker that stops in time on SIGTERM whatever it
// validates.

// regexSpec is a spec whose step writes out/result.json with gen (an awk
// program) and whose schema is schema.
func regexSpec(gen string, schema any, timeout string) string {
	b, _ := json.Marshal(map[string]any{
		"version": 1, "timeout": timeout, "max_retry": 0,
		"files":  map[string]string{"gen.awk": gen},
		"steps":  []map[string]any{{"run": []string{"awk", "-f", "gen.awk"}}},
		"output": map[string]any{"result": "out/result.json", "schema": schema},
	})
	return string(b)
}

// awkString writes a JSON array of n strings, each rep copies of unit (no
// quote or backslash), or the one string alone when n is 0.
func awkString(unit string, rep, n int) string {
	one := fmt.Sprintf(`s = sprintf("%%%ds", ""); gsub(/ /, "%s", s)`, rep, unit)
	if n == 0 {
		return `BEGIN { ` + one + `; printf "\"%s\"", s > "out/result.json" }`
	}
	return fmt.Sprintf(`BEGIN { %s; printf "[" > "out/result.json"; for (j = 0; j < %d; j++) printf (j ? ",\"%%s\"" : "\"%%s\""), s > "out/result.json"; printf "]" > "out/result.json" }`, one, n)
}

const helloSpec = `{"version": 1, "steps": [{"run": ["echo", "hello"]}]}`

// TestExhaustValidationRegex: the regex attacks end within the task's
// deadline plus 2s with timeout or schema, the worker's peak resident set
// barely moves, and a hello task on the same (single) slot runs right
// after.
func TestExhaustValidationRegex(t *testing.T) {
	t.Parallel()
	b := setup(t, "-concurrency", "1")
	forty := strings.Repeat("a{1000}", 40) // 40,002 instructions
	for _, tc := range []struct {
		name    string
		gen     string
		schema  any
		verdict record.Verdict
		errHas  string
	}{
		// Before: validated in the worker, still running after 4 minutes.
		{"pattern of 40 x a{1000} on 100,000 characters", awkString("a", 100_000, 0),
			map[string]any{"type": "string", "pattern": forty}, record.VerdictSchema, "validation too costly"},
		// Within the child's bound of work, but slower than the task:
		// killed at the deadline.
		{"pattern of 10 x (a|b){1000} on 100,000 characters", awkString("a", 100_000, 0),
			map[string]any{"type": "string", "pattern": strings.Repeat("(a|b){1000}", 10) + "c"}, record.VerdictTimeout, "deadline"},
		// Before: 3 strings of 21 KB took the worker from 31 MB to 596 MB
		// and ended 17.5s past a 5s deadline.
		{"format regex on 3 x 21 KB", awkString("a{1000}", 3000, 3),
			map[string]any{"type": "array", "items": map[string]any{"type": "string", "format": "regex"}}, record.VerdictSchema, "does not satisfy"},
		{"format regex on 200 x 4 KB", awkString("a{1000}", 585, 200),
			map[string]any{"type": "array", "items": map[string]any{"type": "string", "format": "regex"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 5 * time.Second
			b.resetPeak()
			before := b.workerStats()
			start := time.Now()
			rec := b.run(regexSpec(tc.gen, tc.schema, timeout.String()))
			took := time.Since(start)
			after := b.workerStats()
			t.Logf("%s: %s in %s (%.0f ms recorded): %s; worker %s -> %s", tc.name, rec.Verdict, took, rec.DurationMS, rec.Error, before, after)
			if tc.verdict == "" {
				if rec.State == record.StateFailed {
					t.Fatalf("want the run carried out:\n%s", mustJSON(t, rec))
				}
			} else if rec.State != record.StateFailed || rec.Verdict != tc.verdict || !strings.Contains(rec.Error, tc.errHas) {
				t.Fatalf("want failed %s (%q):\n%s", tc.verdict, tc.errHas, mustJSON(t, rec))
			}
			if rec.DurationMS > float64((timeout+2*time.Second)/time.Millisecond) {
				t.Errorf("the run took %.0f ms, past its timeout %s + 2s", rec.DurationMS, timeout)
			}
			if grew := after.HWM - before.RSS; grew > 64<<20 {
				t.Errorf("the worker's peak grew by %d MiB", grew>>20)
			}
			if !strings.Contains(rec.Isolation.Validation, "child process killed at the task's deadline") {
				t.Errorf("isolation.validation = %q", rec.Isolation.Validation)
			}
			start = time.Now()
			hello := b.run(helloSpec)
			if hello.State != record.StateCompleted || time.Since(start) > 3*time.Second {
				t.Errorf("hello after it: %s in %s", hello.State, time.Since(start))
			}
		})
	}
}

// bombSchema is 3,000 properties, each with pattern a{1000}: 84 KB.
func bombSchema() map[string]any {
	props := map[string]any{}
	for i := range 3000 {
		props[fmt.Sprintf("p%04d", i)] = map[string]any{"pattern": "a{1000}"}
	}
	return map[string]any{"properties": props}
}

// TestExhaustValidationCompileBomb: the enqueue CLI refuses the compile
// bomb in under 2s and 100 MB, naming the schema path (before: 19s and 1.8
// GB); the worker, sent it past the client, refuses it too, without
// growing.
func TestExhaustValidationCompileBomb(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := regexSpec(`BEGIN { printf "{}" > "out/result.json" }`, bombSchema(), "5s")
	if len(spec) < 80_000 {
		t.Fatalf("the bomb is %d bytes", len(spec))
	}
	cmd := exec.Command(bin.enqueu, "-redis", b.url, "-queue", b.queue, "-")
	cmd.Stdin = strings.NewReader(spec)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	code, maxRSS := measuredRun(t, cmd)
	took := time.Since(start)
	t.Logf("enqueue: exit %d in %s, peak RSS %d MiB: %s", code, took, maxRSS>>20, strings.TrimSpace(errb.String()))
	if code != 2 || !strings.Contains(errb.String(), "output.schema") ||
		!strings.Contains(errb.String(), "#/properties/p0099/pattern") {
		t.Errorf("enqueue exit %d, stderr %q; want 2 and an error naming output.schema and #/properties/p0099/pattern", code, errb.String())
	}
	if took > 2*time.Second || maxRSS > 100<<20 {
		t.Errorf("enqueue took %s and %d MiB refusing the bomb; want under 2s and 100 MB", took, maxRSS>>20)
	}

	// Past the client, as an untrusted enqueuer could.
	b.resetPeak()
	before := b.workerStats()
	rec := b.runRaw(spec)
	after := b.workerStats()
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, "#/properties/p0099/pattern") {
		t.Errorf("worker: want the spec rejected naming the pattern:\n%s", mustJSON(t, rec))
	}
	if grew := after.HWM - before.RSS; grew > 32<<20 {
		t.Errorf("the worker's peak grew by %d MiB on the bomb (before: 1.6 GB)", grew>>20)
	}
	t.Logf("worker: %s in %.0f ms; %s -> %s", rec.Verdict, rec.DurationMS, before, after)
}

// TestExhaustValidationSIGTERM: SIGTERM while a child validates a result
// stops the worker within -shutdown-timeout plus -grace (1s and 200ms
// here), and the child with it (before: 80s).
func TestExhaustValidationSIGTERM(t *testing.T) {
	t.Parallel()
	b := setup(t, "-concurrency", "1")
	schema := map[string]any{"type": "string", "pattern": strings.Repeat("(a|b){1000}", 10) + "c"}
	e, err := b.client.Enqueue(context.Background(), b.spec(regexSpec(awkString("a", 100_000, 0), schema, "60s")))
	if err != nil {
		t.Fatal(err)
	}
	pid := b.worker.cmd.Process.Pid
	var child int
	if !eventually(30*time.Second, func() bool { child = validationChild(pid); return child > 0 }) {
		t.Fatalf("no validation child of the worker for task %s:\n%s", e.TaskID, b.worker.logs.String())
	}
	// Confined as a step: in the slot's control group, as the slot's uid.
	var cg string
	if !eventually(5*time.Second, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", child))
		cg = string(b)
		return strings.Contains(cg, "slot-")
	}) {
		t.Errorf("the validation child is not in a slot's control group:\n%s", cg)
	}
	if st := statsUID(child); st == "0" || st == "" {
		t.Errorf("the validation child runs as uid %q, want the slot's", st)
	}
	start := time.Now()
	if err := b.worker.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.worker.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not stop within 30s of SIGTERM:\n%s", b.worker.logs.String())
	}
	took := time.Since(start)
	t.Logf("worker stopped %s after SIGTERM (validation child %d)", took, child)
	if limit := time.Second + 200*time.Millisecond + time.Second; took > limit {
		t.Errorf("the worker stopped %s after SIGTERM; want within -shutdown-timeout + -grace + 1s (%s)", took, limit)
	}
	if !eventually(2*time.Second, func() bool { return syscall.Kill(child, 0) != nil }) {
		t.Errorf("the validation child %d outlived the worker", child)
	}
}

// validationChild returns the pid of a validation child of the process
// ppid, 0 when it has none.
func validationChild(ppid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cl, []byte("__airlock_validate")) {
			return pid
		}
	}
	return 0
}

// statsUID returns the real uid of process pid, "" when it is gone.
func statsUID(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return ""
}
