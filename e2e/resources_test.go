//go:build linux

package e2e

import (
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

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// Resources: what the step's cgroup counts and limits, runtimes at the
// default limits, results that would cost the worker, a policy that fails
// closed, publication per task, and a worker that survives its own stderr.

const csvData = "name,amount\na,10\nb,32\n"

// runtimes are a hello world and a small CSV task per language; each
// prints "hello" and then "total=42 rows=2".
var runtimes = []struct {
	name, bin string
	files     map[string]string
	hello     []string
	csv       []string
}{
	{"sh", "sh", map[string]string{
		"csv.sh": `awk -F, 'NR>1 {t+=$2; n++} END {printf "total=%d rows=%d\n", t, n}' in/data.csv`,
	}, []string{"sh", "-c", "echo hello"}, []string{"sh", "csv.sh"}},
	{"python3", "python3", map[string]string{
		"sum_csv.py": "import csv\nrows = list(csv.DictReader(open('in/data.csv')))\nprint('total=%d rows=%d' % (sum(int(r['amount']) for r in rows), len(rows)))\n",
	}, []string{"python3", "-c", "print('hello')"}, []string{"python3", "sum_csv.py"}},
	{"node", "node", map[string]string{
		"csv.js": "const lines = require('fs').readFileSync('in/data.csv', 'utf8').trim().split('\\n').slice(1);\n" +
			"const total = lines.reduce((t, l) => t + Number(l.split(',')[1]), 0);\nconsole.log(`total=${total} rows=${lines.length}`);\n",
	}, []string{"node", "-e", "console.log('hello')"}, []string{"node", "csv.js"}},
	{"java", "java", map[string]string{
		"Hello.java": "class Hello { public static void main(String[] a) { System.out.println(\"hello\"); } }\n",
		"Csv.java": "import java.nio.file.*; import java.util.*;\nclass Csv { public static void main(String[] a) throws Exception {\n" +
			"  List<String> l = Files.readAllLines(Path.of(\"in/data.csv\")); int t = 0;\n" +
			"  for (String s : l.subList(1, l.size())) t += Integer.parseInt(s.split(\",\")[1]);\n" +
			"  System.out.println(\"total=\" + t + \" rows=\" + (l.size() - 1)); } }\n",
	}, []string{"java", "Hello.java"}, []string{"java", "Csv.java"}},
	{"perl", "perl", map[string]string{
		"csv.pl": "open my $f, '<', 'in/data.csv' or die; <$f>; my ($t, $n) = (0, 0);\nwhile (<$f>) { chomp; my @c = split /,/; $t += $c[1]; $n++ }\nprint \"total=$t rows=$n\\n\";\n",
	}, []string{"perl", "-e", "print qq(hello\\n)"}, []string{"perl", "csv.pl"}},
}

// TestRuntimesAtDefaults: a hello world and a small CSV task start and
// finish at the default limits in every runtime installed in the view.
func TestRuntimesAtDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			if _, err := lookInView(rt.bin); err != nil {
				t.Skipf("%s is not installed in the steps' view (/usr/local/bin, /usr/bin, /bin): %v", rt.bin, err)
			}
			files := map[string]string{"in/data.csv": csvData}
			for k, v := range rt.files {
				files[k] = v
			}
			spec, _ := json.Marshal(map[string]any{
				"version": 1, "files": files, "timeout": "120s",
				"steps": []map[string]any{{"name": "hello", "run": rt.hello}, {"name": "csv", "run": rt.csv}},
			})
			rec := b.run(string(spec))
			if rec.Verdict != record.VerdictOK || len(rec.Steps) != 2 {
				t.Fatalf("%s at the defaults:\n%s", rt.name, mustJSON(t, rec))
			}
			if got := strings.TrimSpace(rec.Steps[0].Stdout); got != "hello" {
				t.Errorf("hello: stdout %q", got)
			}
			if got := strings.TrimSpace(rec.Steps[1].Stdout); got != "total=42 rows=2" {
				t.Errorf("csv: stdout %q, stderr %q", got, rec.Steps[1].Stderr)
			}
			for _, st := range rec.Steps {
				if st.MemoryPeakBytes <= 0 || st.MemoryPeakBytes > 512<<20 {
					t.Errorf("%s: memory_peak_bytes %d, want within the default 512MiB", st.Name, st.MemoryPeakBytes)
				}
			}
		})
	}
}

// lookInView finds a program where a step's default PATH does.
func lookInView(name string) (string, error) {
	for _, d := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// TestMemoryCounted: the cgroup counts what RLIMIT_AS missed: memfd and
// /dev/shm pages, and every process of the step together. Each ends with
// the memory verdict and the peak at the limit.
func TestMemoryCounted(t *testing.T) {
	t.Parallel()
	if _, err := lookInView("python3"); err != nil {
		t.Skip("needs python3 in the view")
	}
	b := setup(t)
	for _, tc := range []struct {
		name, limit string
		argv        []string
	}{
		{"heap", "128MiB", []string{"python3", "-c", "b = bytearray(300 << 20); print('held')"}},
		{"memfd 16x64MiB", "128MiB", []string{"python3", "-c",
			"import os\nfds = []\nfor i in range(16):\n  fd = os.memfd_create('x')\n  os.write(fd, b'x' * (64 << 20))\n  fds.append(fd)\nprint('held 1GiB')"}},
		{"dev/shm files", "128MiB", []string{"sh", "-c", "for i in 1 2 3 4; do head -c 60000000 /dev/zero > /dev/shm/f$i || exit 3; done; echo held"}},
		{"4 children x 100MiB", "256MiB", []string{"sh", "-c",
			"for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(100 << 20); time.sleep(2)' & done; wait; echo held"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _ := json.Marshal(map[string]any{"version": 1, "steps": []map[string]any{{"run": tc.argv}},
				"limits": map[string]any{"memory": tc.limit, "workspace": "1GiB", "file_size": "1GiB"}})
			rec := b.run(string(spec))
			st := stepOf(t, rec, 0)
			if st.Verdict != record.VerdictMemory || rec.Verdict != record.VerdictMemory || st.OOMKills < 1 {
				t.Fatalf("want the memory verdict:\n%s", mustJSON(t, rec))
			}
			if strings.Contains(st.Stdout, "held") && st.ExitCode != nil && *st.ExitCode == 0 && st.OOMKills == 0 {
				t.Errorf("the step held more than its limit: %q", st.Stdout)
			}
			limit := int64(128 << 20)
			if tc.limit == "256MiB" {
				limit = 256 << 20
			}
			if st.MemoryPeakBytes > limit || st.MemoryPeakBytes < limit/2 {
				t.Errorf("memory_peak_bytes %d, want near the limit %d and not above", st.MemoryPeakBytes, limit)
			}
			checkClean(t, rec)
		})
	}
}

// TestProcessesByPids: processes is the cgroup's pids limit: threads and
// processes of the step together, not of its uid.
func TestProcessesByPids(t *testing.T) {
	t.Parallel()
	if _, err := lookInView("perl"); err != nil {
		t.Skip("needs perl in the view")
	}
	b := setup(t)
	// perl forks until fork fails, then says how many children it has:
	// printing needs no fork.
	rec := b.run(`{"version": 1, "limits": {"processes": 8}, "steps": [{"run": ["perl", "-e",
		"my $n = 0; for (1..20) { my $p = fork; last unless defined $p; if (!$p) { sleep 3; exit } $n++ } print \"$n\\n\"; 1 while wait != -1"]}]}`)
	st := stepOf(t, rec, 0)
	n, err := strconv.Atoi(strings.TrimSpace(st.Stdout))
	if err != nil || n < 1 || n > 7 {
		t.Errorf("perl forked %q children under processes: 8 (perl is one), want 1 to 7:\n%s", st.Stdout, mustJSON(t, rec))
	}
	checkClean(t, rec)
}

// hostileSpec is a step that writes gen's output as the result, checked
// against schema within timeout.
func hostileSpec(gen string, schema any, timeout string) string {
	b, _ := json.Marshal(map[string]any{
		"version": 1, "timeout": timeout, "max_retry": 0,
		"files":  map[string]string{"gen.sh": gen},
		"steps":  []map[string]any{{"run": []string{"sh", "gen.sh"}}},
		"output": map[string]any{"result": "out/result.json", "schema": schema},
	})
	return string(b)
}

// repeatJSON is a shell line writing a JSON array of n copies of v.
func repeatJSON(v string, n int) string {
	return fmt.Sprintf(`awk 'BEGIN { printf "["; for (i = 0; i < %d; i++) printf (i ? ",%s" : "%s"); printf "]" }' > out/result.json`, n, v, v)
}

// TestHostileResults: results that would cost the worker seconds of CPU or
// gigabytes fail quickly and are never promoted, and the worker's memory
// stays flat.
func TestHostileResults(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, "-store", store, "-policy", writePolicy(t, `{"default": "promote"}`))
	numbers := map[string]any{"type": "array", "items": map[string]any{"type": "number"}}
	fanout := func(typ string) map[string]any {
		all := make([]any, 255)
		for i := range all {
			all[i] = map[string]any{"type": typ}
		}
		return map[string]any{"items": map[string]any{"allOf": all}}
	}
	hwm0 := vmHWM(t, b.worker.cmd.Process.Pid)
	for _, tc := range []struct {
		name, gen string
		schema    any
		timeout   string
		verdict   record.Verdict
		errHas    string
	}{
		{"100 numbers 1e999999", repeatJSON("1e999999", 100), numbers, "60s", record.VerdictOutput, "beyond float64's range"},
		{"1e-999999", repeatJSON("1e-999999", 1), numbers, "60s", record.VerdictOutput, "too small for a float64"},
		{"a 200-digit number", repeatJSON(strings.Repeat("9", 200), 1), numbers, "60s", record.VerdictOutput, "longer than"},
		{"fan-out 255 x 60000 values past the deadline", repeatJSON("0", 60000), fanout("number"), "2s", record.VerdictTimeout, "deadline"},
		{"fan-out 255 x 400 failing checks", repeatJSON("0", 400), fanout("string"), "60s", record.VerdictSchema, "does not satisfy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rec := b.run(hostileSpec(tc.gen, tc.schema, tc.timeout))
			took := time.Since(start)
			if rec.State != record.StateFailed || rec.Verdict != tc.verdict || !strings.Contains(rec.Error, tc.errHas) {
				t.Fatalf("want failed %s (%q):\n%s", tc.verdict, tc.errHas, mustJSON(t, rec))
			}
			if rec.ApprovalID != "" || rec.PublishedTo != "" {
				t.Errorf("a hostile result was parked or published:\n%s", mustJSON(t, rec))
			}
			if took > 30*time.Second {
				t.Errorf("took %s", took)
			}
			if tc.verdict == record.VerdictSchema && len(rec.SchemaErrors) != 20 {
				t.Errorf("%d schema errors, want the first 20", len(rec.SchemaErrors))
			}
		})
	}
	if ents, _ := os.ReadDir(store); len(ents) > 0 {
		t.Errorf("the store holds %d entries after hostile results", len(ents))
	}
	// Before the bounds, the last case alone grew the worker by 1.3 GB.
	if hwm := vmHWM(t, b.worker.cmd.Process.Pid); hwm-hwm0 > 40<<20 {
		t.Errorf("worker peak RSS grew by %d MiB on hostile results (from %d MiB)", (hwm-hwm0)>>20, hwm0>>20)
	}
}

// vmHWM reads a process's peak resident set, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestPolicyFailsClosed: a park rule that cannot be evaluated parks; a
// number beyond float64 never reaches the policy.
func TestPolicyFailsClosed(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	pol := writePolicy(t, `{"default": "promote", "rules": [{"name": "big-amount", "when": {"result": {"pointer": "/amount", "op": ">", "value": 1000}}, "then": "park"}]}`)
	b := setup(t, "-store", store, "-policy", pol)
	for _, tc := range []struct {
		result  string
		state   record.State
		verdict record.Verdict
		reason  string
	}{
		{`{"amount": "5000000"}`, record.StateParked, record.VerdictOK, `rule big-amount could not be evaluated, so it parks: /amount is "5000000" (a string)`},
		{`{"note": "no amount"}`, record.StateParked, record.VerdictOK, "rule big-amount could not be evaluated, so it parks: /amount is missing"},
		{`{"amount": 5000}`, record.StateParked, record.VerdictOK, "rule big-amount: /amount is 5000 > 1000"},
		{`{"amount": 1e400}`, record.StateFailed, record.VerdictOutput, ""},
		{`{"amount": 10}`, record.StatePromoted, record.VerdictOK, "no rule matched"},
	} {
		script, _ := json.Marshal("printf '%s' '" + tc.result + "' > out/result.json")
		rec := b.run(`{"version": 1, "files": {"gen.sh": ` + string(script) + `}, "steps": [{"run": ["sh", "gen.sh"]}],
			"output": {"result": "out/result.json", "schema": {"type": "object"}}}`)
		if rec.State != tc.state || rec.Verdict != tc.verdict {
			t.Errorf("%s: want %s/%s:\n%s", tc.result, tc.state, tc.verdict, mustJSON(t, rec))
			continue
		}
		if tc.reason != "" && (rec.Decision == nil || !strings.Contains(strings.Join(rec.Decision.Reasons, "\n"), tc.reason)) {
			t.Errorf("%s: reasons %v, want %q", tc.result, rec.Decision, tc.reason)
		}
	}
}

// TestTasksOfOneRunPublish: tasks that share a run_id all publish, each
// under its own name; a later task reusing the run_id takes nothing from
// them. The store is the worker's alone.
func TestTasksOfOneRunPublish(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	b := setup(t, "-store", store, "-policy", writePolicy(t, `{"default": "promote"}`))
	var recs []*record.Run
	for i := range 3 {
		rec := b.run(reportSpec(fmt.Sprintf(`{"total": %d}`, i), `"run_id": "agent-run-7",`))
		if rec.State != record.StatePromoted || rec.PublishedTo != filepath.Join(store, "agent-run-7", rec.TaskID) {
			t.Fatalf("task %d: want promoted under its task id:\n%s", i, mustJSON(t, rec))
		}
		recs = append(recs, rec)
	}
	for i, rec := range recs {
		var m approve.Manifest
		mb, err := os.ReadFile(filepath.Join(rec.PublishedTo, "manifest.json"))
		if err != nil || json.Unmarshal(mb, &m) != nil || m.TaskID != rec.TaskID || m.ApprovalID != rec.ApprovalID {
			t.Errorf("task %d: manifest %s (%v)", i, mb, err)
		}
		res, _ := os.ReadFile(filepath.Join(rec.PublishedTo, "result.json"))
		if string(res) != fmt.Sprintf(`{"total": %d}`, i) {
			t.Errorf("task %d: result %q", i, res)
		}
	}
	err := filepath.WalkDir(store, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkerSurvivesClosedStderr: a worker whose stdout and stderr are a
// pipe nobody reads any more (worker | head, and head exited) runs tasks
// and stays up.
func TestWorkerSurvivesClosedStderr(t *testing.T) {
	t.Parallel()
	needRoot(t)
	b := newBundle(t)
	tmp := filepath.Dir(b.root)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone: every write is EPIPE (or SIGPIPE)
	cmd := exec.Command(bin.worker, "-redis", b.url, "-queues", b.queue, "-workspace-root", b.root,
		"-uid-lock-dir", filepath.Join(os.TempDir(), "airlock-e2e-uids"), "-shutdown-timeout", "1s", "-store", filepath.Join(tmp, "store"))
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	b.worker = &workerProc{cmd: cmd, logs: &lockedBuffer{}}
	for i := range 2 {
		rec := b.run(reportSpec(`{"total": 1}`, ""))
		if rec.State != record.StateParked {
			t.Fatalf("task %d: want parked:\n%s", i, mustJSON(t, rec))
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the worker exited: %v", err)
	default:
	}
	if ents, _ := os.ReadDir(b.root); len(ents) == 0 {
		t.Error("no slot directory: did the worker run?")
	}
}

// TestFinalFailureEmitsEvent: when the worker itself fails a task on its
// last attempt (here the approval store holds a corrupt key where the
// run's approval goes), the events stream says failed.
func TestFinalFailureEmitsEvent(t *testing.T) {
	t.Parallel()
	// A key prefix of the test's own: the worker, the client and the
	// events stream all use it, and nothing else sees the corrupt index.
	prefix := "e2e-" + numMarker() + "-" + numMarker() + ":"
	b := setup(t, "-prefix", prefix)
	rdb := redistest.Client(t)
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Retention: time.Hour, Prefix: prefix})
	index := prefix + "approvals:pending"
	if err := rdb.Set(context.Background(), index, "not a sorted set", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	stream := events.NewStream(rdb, prefix)
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	from, err := stream.Last(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec := b.run(reportSpec(`{"total": 1}`, `"max_retry": 0,`))
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, "park output") {
		t.Fatalf("want failed/error (park output):\n%s", mustJSON(t, rec))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got events.Event
	err = stream.Follow(ctx, from, time.Second, nil, func(e events.Event) (bool, error) {
		if e.TaskID == rec.TaskID {
			got = e
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no event for task %s: %v", rec.TaskID, err)
	}
	if got.State != record.StateFailed || got.Verdict != record.VerdictError || !strings.Contains(got.Error, "park output") {
		t.Errorf("event %+v, want failed/error with the error", got)
	}
	// The worker published its limits under the prefix too.
	if n, _ := rdb.Exists(context.Background(), prefix+"policy:"+b.queue).Result(); n != 1 {
		t.Errorf("no %spolicy:%s", prefix, b.queue)
	}
}
