//go:build linux

package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// These tests need no root: the phases of a run are tested on a
// workspace in directory mode, with a real Redis and a real store.

func TestClassify(t *testing.T) {
	cpu := 2 * time.Second
	for _, tt := range []struct {
		name string
		r    sandbox.Result
		full bool
		want record.Verdict
	}{
		{"ok", sandbox.Result{Exited: true}, false, record.VerdictOK},
		{"exit", sandbox.Result{Exited: true, ExitCode: 3}, false, record.VerdictExit},
		{"exec error", sandbox.Result{StartError: "not found"}, false, record.VerdictExecError},
		{"canceled beats the rest", sandbox.Result{Canceled: true, TimedOut: true}, false, record.VerdictCanceled},
		{"killed past output_total", sandbox.Result{OutputLimit: true, Signal: syscall.SIGKILL}, false, record.VerdictOutputLimit},
		{"past output_total, even with an OOM kill", sandbox.Result{OutputLimit: true, OOMKills: 1, Exited: true}, false, record.VerdictOutputLimit},
		{"canceled past output_total: handed back", sandbox.Result{Canceled: true, OutputLimit: true}, false, record.VerdictCanceled},
		{"an OOM kill even with exit 0", sandbox.Result{Exited: true, OOMKills: 1}, false, record.VerdictMemory},
		{"an OOM kill before the deadline", sandbox.Result{TimedOut: true, OOMKills: 2}, false, record.VerdictMemory},
		{"timeout", sandbox.Result{TimedOut: true, Signal: syscall.SIGTERM}, false, record.VerdictTimeout},
		{"SIGXCPU", sandbox.Result{Signal: syscall.SIGXCPU}, false, record.VerdictCPUTime},
		{"SIGKILL at the hard CPU limit", sandbox.Result{Signal: syscall.SIGKILL, CPU: 3 * time.Second}, false, record.VerdictCPUTime},
		{"SIGKILL below it", sandbox.Result{Signal: syscall.SIGKILL, CPU: time.Second}, false, record.VerdictSignal},
		{"SIGXFSZ", sandbox.Result{Signal: syscall.SIGXFSZ}, false, record.VerdictFileSize},
		{"failed with a full workspace", sandbox.Result{Exited: true, ExitCode: 1}, true, record.VerdictWorkspaceQuota},
		{"ok with a full workspace", sandbox.Result{Exited: true}, true, record.VerdictOK},
		{"a signal", sandbox.Result{Signal: syscall.SIGSEGV}, false, record.VerdictSignal},
	} {
		if got := classify(tt.r, tt.full, cpu); got != tt.want {
			t.Errorf("%s: classify = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestFailureNamesTheStep(t *testing.T) {
	code := 2
	rec := &record.Run{Verdict: record.VerdictExit, Steps: []record.Step{
		{Name: "fetch", Verdict: record.VerdictOK},
		{Name: "transform", Verdict: record.VerdictExit, ExitCode: &code},
	}}
	if got, want := failure(rec), "step transform: exit (exit code 2)"; got != want {
		t.Errorf("failure = %q, want %q", got, want)
	}
	rec = &record.Run{Verdict: record.VerdictExecError, Steps: []record.Step{{Name: "s", Verdict: record.VerdictExecError, Error: `"nope" not found in PATH`}}}
	if got, want := failure(rec), `step s: exec_error: "nope" not found in PATH`; got != want {
		t.Errorf("failure = %q, want %q", got, want)
	}
}

func TestApprovalID(t *testing.T) {
	a := approvalID("task-1", []byte(`{"version":1}`))
	if a != approvalID("task-1", []byte(`{"version":1}`)) {
		t.Error("a retried attempt (same task, same payload) gets another approval id")
	}
	if a == approvalID("task-1", []byte(`{"version":1,"run_id":"other"}`)) {
		t.Error("a task id reused with another spec gets the same approval id")
	}
	if a == approvalID("task-2", []byte(`{"version":1}`)) {
		t.Error("two tasks share an approval id")
	}
	if len(a) != len("ap-")+32 || !approve.ValidID(a) {
		t.Errorf("approval id %q: want ap- and 128 bits in hex", a)
	}
}

// phaseWorker is a Worker with what the output phases use.
func phaseWorker(t *testing.T, pol string) (*Worker, string) {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := "test:" + redistest.Queue(t) + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	risk := policy.NoPolicy()
	if pol != "" {
		var err error
		if risk, err = policy.Parse([]byte(pol), "json"); err != nil {
			t.Fatal(err)
		}
	}
	store := t.TempDir()
	w := &Worker{log: zerolog.Nop(), cfg: Config{Redis: rdb, Prefix: prefix, RiskPolicy: risk, Sink: &promote.FS{Dir: store}}, tr: tracing.Tracer(nil)}
	w.useStore(approve.NewStore(rdb, approve.Options{Prefix: prefix}))
	w.completer = newCompleter(&w.cfg, w.log)
	return w, store
}

// workspace is a workspace in directory mode holding files.
func workspace(t *testing.T, files map[string]string) *tmpfs.Workspace {
	t.Helper()
	m, err := tmpfs.New(filepath.Join(t.TempDir(), "root"), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	slot, err := m.Slot("s0", os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := slot.Create(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Remove() })
	if _, err := ws.WriteFiles(files); err != nil {
		t.Fatal(err)
	}
	return ws
}

func spec(t *testing.T, js string) *tasks.Spec {
	t.Helper()
	s, err := tasks.Decode([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(limitsPolicy()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOutputPhases: check, decide and settle on real files, a real
// approval store and a real store directory, for each way a run's output
// can end.
func TestOutputPhases(t *testing.T) {
	const schema = `{"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}`
	specJS := `{"version": 1, "run_id": "r1", "steps": [{"run": ["true"]}],
		"output": {"result": "out/result.json", "schema": ` + schema + `, "artifacts": ["out/*.csv"]}}`
	for _, tt := range []struct {
		name     string
		policy   string
		files    map[string]string
		state    record.State
		verdict  record.Verdict
		errHas   string
		rule     string
		artifact bool
	}{
		{"parked without a policy", "", map[string]string{"out/result.json": `{"total": 3}`, "out/a.csv": "x\n"},
			record.StateParked, record.VerdictOK, "", "no-policy", true},
		{"promoted by the policy", `{"default": "promote"}`, map[string]string{"out/result.json": `{"total": 3}`},
			record.StatePromoted, record.VerdictOK, "", "default", false},
		{"parked by a rule that cannot be evaluated", `{"default": "promote", "rules": [{"name": "big", "when": {"result": {"pointer": "/n", "op": ">", "value": 1}}, "then": "park"}]}`,
			map[string]string{"out/result.json": `{"total": 3}`}, record.StateParked, record.VerdictOK, "", "big", false},
		{"schema", `{"default": "promote"}`, map[string]string{"out/result.json": `{"total": "3"}`},
			record.StateFailed, record.VerdictSchema, "does not satisfy", "", false},
		{"no result", `{"default": "promote"}`, map[string]string{},
			record.StateFailed, record.VerdictOutput, "output.result", "", false},
		{"a number beyond float64", `{"default": "promote"}`, map[string]string{"out/result.json": `{"total": 1e400}`},
			record.StateFailed, record.VerdictOutput, "beyond float64", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, store := phaseWorker(t, tt.policy)
			sp := spec(t, specJS)
			rec := &record.Run{TaskID: "task-" + strings.ReplaceAll(tt.name, " ", "-"), RunID: sp.RunID, Queue: "q", State: record.StateCompleted, Verdict: record.VerdictOK}
			j := &job{spec: sp, seat: seat{slot: &slot{uidN: -1}}, rec: rec, aid: approvalID(rec.TaskID, []byte(specJS))}
			out := w.output(context.Background(), j, workspace(t, tt.files), time.Now().Add(time.Minute))
			if out.err != nil || out.promote != "" {
				t.Fatalf("outcome %+v", out)
			}
			if rec.State != tt.state || rec.Verdict != tt.verdict || !strings.Contains(rec.Error, tt.errHas) {
				t.Fatalf("record: %s/%s %q, want %s/%s %q", rec.State, rec.Verdict, rec.Error, tt.state, tt.verdict, tt.errHas)
			}
			if tt.rule != "" && (rec.Decision == nil || rec.Decision.Rule != tt.rule) {
				t.Errorf("decision %+v, want rule %s", rec.Decision, tt.rule)
			}
			if got := len(rec.Artifacts) == 1; got != tt.artifact {
				t.Errorf("artifacts %+v", rec.Artifacts)
			}
			_, err := os.Stat(filepath.Join(store, sp.RunID, rec.TaskID, "manifest.json"))
			if published := err == nil; published != (tt.state == record.StatePromoted) {
				t.Errorf("published: %v, state %s", published, rec.State)
			}
			if tt.state == record.StatePromoted && rec.PublishedTo != filepath.Join(store, sp.RunID, rec.TaskID) {
				t.Errorf("published_to %q", rec.PublishedTo)
			}
			if tt.state == record.StateParked || tt.state == record.StatePromoted {
				a, err := w.approvals.Get(context.Background(), rec.ApprovalID)
				if err != nil || a.TaskID != rec.TaskID || a.State.Run() != map[record.State]record.State{record.StateParked: record.StateParked, record.StatePromoted: record.StateAccepted}[tt.state] {
					t.Errorf("approval %+v, %v", a, err)
				}
			}
		})
	}
}

// TestSettleEmitsNoEvent: the worker's own transitions are quiet; report
// emits the record's state once, after the record is stored.
func TestSettleEmitsNoEvent(t *testing.T) {
	w, _ := phaseWorker(t, `{"default": "promote"}`)
	ctx := context.Background()
	from, err := w.completer.events.Last(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(t, `{"version": 1, "steps": [{"run": ["true"]}], "output": {"result": "out/result.json"}}`)
	rec := &record.Run{TaskID: "t-quiet", RunID: sp.RunID, Queue: "q", State: record.StateCompleted, Verdict: record.VerdictOK}
	j := &job{spec: sp, seat: seat{slot: &slot{uidN: -1}}, rec: rec, aid: "ap-quiet"}
	w.output(ctx, j, workspace(t, map[string]string{"out/result.json": `{}`}), time.Now().Add(time.Minute))
	if rec.State != record.StatePromoted {
		t.Fatalf("state %s: %s", rec.State, rec.Error)
	}
	if err := w.completer.events.Append(ctx, runEvent(rec)); err != nil { // what complete stores with the record
		t.Fatal(err)
	}
	var got []record.State
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = w.completer.events.Follow(fctx, from, 100*time.Millisecond, func() (bool, error) { return true, nil }, func(e events.Event) (bool, error) {
		got = append(got, e.State)
		return false, nil
	})
	if diff := cmp.Diff([]record.State{record.StatePromoted}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func limitsPolicy() limits.Policy { return limits.DefaultPolicy() }
