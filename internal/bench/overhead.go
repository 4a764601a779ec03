//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tmpfs"
)

// Overhead rows, in the order printed, with what bounds each.
var overheadItems = []struct{ key, name, per, bound string }{
	{"ws_create", "workspace create (tmpfs.Slot.Create)", "task", "remount of the slot's tmpfs to the quota + reset of its top dir + mkdir/chown of in,out,tmp"},
	{"ws_write", "workspace write files (1 file, 1 KiB)", "task", "openat2 + write + fchown on tmpfs (memory)"},
	{"ws_remove", "workspace remove (Workspace.Remove)", "task", "an unlinkat walk of the workspace's entries + reset of its top dir"},
	{"tmpdir", "baseline temp dir (MkdirTemp+3 mkdir+write+RemoveAll)", "task", "disk filesystem metadata ops below $TMPDIR"},
	{"slot_run", "step via slot helper: Slot.Run(/bin/true)", "step", "fork+exec in the helper, PATH lookup, ptrace stop at exec + prlimit, 3 pipes + fd passing, kill(-1) sweep, IPC sweep, 2 unix-socket messages"},
	{"exec", "bare exec.Command(/bin/true).Run()", "step", "fork/exec (clone+execve+wait) of a tiny binary"},
	{"slot_start", "helper start + stop: sandbox.NewSlot+Close", "slot", "re-exec of this binary + clone of pid/mnt/ipc/uts/net namespaces, the view (~25 mounts, pivot_root), uid drop, Landlock, seccomp; once per slot, not per task"},
	{"read_result", "output: collect.ReadResult (1 KiB)", "task", "openat2 walk + fstat + read on tmpfs"},
	{"compile", "output: contract.Compile (same schema: cache hit)", "task", "SHA-256 of the schema + LRU lookup"},
	{"compile_new", "output: contract.Compile (new schema: cache miss)", "schema", "gojsonschema compilation + meta-schema check; once per distinct schema per process"},
	{"validate", "output: Schema.Validate (1 KiB result)", "task", "gojsonschema walk of the document: CPU"},
	{"encode", "record encode: json.Marshal(record.Run)", "task", "encoding/json reflection: CPU"},
	{"hset", "Redis HSET of a 2 KiB record (the result write)", "task", "one Redis round trip over loopback"},
	{"xadd", "Redis XADD of a run event (MAXLEN ~100000)", "task", "one Redis round trip over loopback"},
}

// overheadAcc gathers per-round microseconds per item.
type overheadAcc struct {
	samples map[string][]float64
	cpu     map[string][]float64
	iters   map[string]int
}

func newOverheadAcc() *overheadAcc {
	return &overheadAcc{samples: map[string][]float64{}, cpu: map[string][]float64{}, iters: map[string]int{}}
}

func (a *overheadAcc) add(key string, total time.Duration, n int) {
	a.samples[key] = append(a.samples[key], float64(total.Nanoseconds())/1000/float64(n))
	a.iters[key] = n
}

// addCPU records the CPU time the operations took, all processes involved.
func (a *overheadAcc) addCPU(key string, total time.Duration, n int) {
	a.cpu[key] = append(a.cpu[key], float64(total.Nanoseconds())/1000/float64(n))
}

func (a *overheadAcc) rows() []OverheadRow {
	var out []OverheadRow
	for _, it := range overheadItems {
		if xs := a.samples[it.key]; len(xs) > 0 {
			row := OverheadRow{Name: it.name, Per: it.per, Iterations: a.iters[it.key], Micros: newStat(xs), Bound: it.bound}
			if cs := a.cpu[it.key]; len(cs) > 0 {
				s := newStat(cs)
				row.CPUMicros = &s
			}
			out = append(out, row)
		}
	}
	return out
}

// selfCPU is the CPU time of this process and of the children it reaped.
func selfCPU() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// helperPID finds this process's slot helper (the only one while the
// overhead section runs), 0 if none.
func helperPID() int {
	for _, p := range children(os.Getpid()) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if strings.Contains(string(b), "__airlock_slot_helper") {
			return p
		}
	}
	return 0
}

// overhead measures the per-task costs of the hot path in this process,
// with the packages the worker uses, configured as the worker configures
// them.
func (h *harness) overhead(ctx context.Context, acc *overheadAcc, round int) error {
	iters := h.sz.Overhead
	dir, err := h.dir("ovh")
	if err != nil {
		return err
	}
	mgr, err := tmpfs.New(filepath.Join(dir, "root"), h.root)
	if err != nil {
		return err
	}
	defer mgr.Close()
	uid, gid := os.Geteuid(), os.Getegid()
	scfg := sandbox.SlotConfig{UID: -1, GID: -1, Landlock: true, Grace: 500 * time.Millisecond, Stderr: os.Stderr}
	slotName := "slot-bench"
	if h.root {
		lease, err := sandbox.LeaseUID(h.uidLock, uidFirst, uidCount)
		if err != nil {
			return err
		}
		defer lease.Release()
		uid, gid = lease.UID, lease.UID
		scfg.UID, scfg.GID, scfg.Namespaces = uid, gid, true
		slotName = fmt.Sprintf("slot-%d", uid)
	}
	area, err := mgr.Slot(slotName, uid, gid)
	if err != nil {
		return err
	}
	defer area.Close()
	scfg.Workspace, scfg.View = area.Dir(), scfg.Namespaces
	files := map[string]string{"gen.sh": scriptSh}
	quota := int64(limits.DefaultPolicy().Default.Workspace)

	// Workspaces, as the worker makes them for each task.
	var tc, tw, tr time.Duration
	for range iters {
		t0 := time.Now()
		ws, err := area.Create(quota)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if _, err := ws.WriteFiles(files); err != nil {
			return err
		}
		t2 := time.Now()
		if err := ws.Remove(); err != nil {
			return err
		}
		tc, tw, tr = tc+t1.Sub(t0), tw+t2.Sub(t1), tr+time.Since(t2)
	}
	acc.add("ws_create", tc, iters)
	acc.add("ws_write", tw, iters)
	acc.add("ws_remove", tr, iters)

	// The baseline's equivalent.
	base := filepath.Join(dir, "base")
	if err := os.Mkdir(base, 0o700); err != nil {
		return err
	}
	t0 := time.Now()
	for range iters {
		d, err := os.MkdirTemp(base, "t-")
		if err != nil {
			return err
		}
		for _, s := range []string{"in", "out", "tmp"} {
			if err := os.Mkdir(filepath.Join(d, s), 0o700); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(d, "gen.sh"), []byte(scriptSh), 0o600); err != nil {
			return err
		}
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	acc.add("tmpdir", time.Since(t0), iters)

	// Helper start, once per slot.
	starts := h.sz.SlotStarts
	t0 = time.Now()
	for range starts {
		s, err := sandbox.NewSlot(scfg)
		if err != nil {
			return err
		}
		s.Close()
	}
	acc.add("slot_start", time.Since(t0), starts)

	// A step through the helper against a bare exec, alternating which
	// goes first from round to round.
	box, err := sandbox.NewSlot(scfg)
	if err != nil {
		return err
	}
	defer box.Close()
	ws, err := area.Create(quota)
	if err != nil {
		return err
	}
	defer ws.Remove()
	step := sandbox.Step{Argv: []string{"/bin/true"}, Limits: limits.DefaultPolicy().Default, Timeout: 10 * time.Second}
	helper := helperPID()
	slotRun := func() error {
		c0 := selfCPU() + procCPU(helper)
		t0 := time.Now()
		for range iters {
			res, err := box.Run(ctx, step)
			if err != nil {
				return err
			}
			if !res.Exited || res.ExitCode != 0 || res.StartError != "" {
				return fmt.Errorf("slot run of /bin/true: %+v", res)
			}
		}
		acc.add("slot_run", time.Since(t0), iters)
		if helper > 0 {
			acc.addCPU("slot_run", selfCPU()+procCPU(helper)-c0, iters)
		}
		return nil
	}
	bare := func() error {
		c0 := selfCPU()
		t0 := time.Now()
		for range iters {
			if err := exec.Command("/bin/true").Run(); err != nil {
				return err
			}
		}
		acc.add("exec", time.Since(t0), iters)
		acc.addCPU("exec", selfCPU()-c0, iters)
		return nil
	}
	order := []func() error{slotRun, bare}
	if round%2 == 1 {
		order = []func() error{bare, slotRun}
	}
	for _, f := range order {
		if err := f(); err != nil {
			return err
		}
	}

	// Output contract, when built in.
	if outputSupport {
		if err := measureValidate(ws, iters, acc); err != nil {
			return fmt.Errorf("validation: %w", err)
		}
	}

	// The record and the Redis writes of a task's end.
	rec := SampleRecord()
	t0 = time.Now()
	var b []byte
	for range iters {
		if b, err = json.Marshal(rec); err != nil {
			return err
		}
	}
	acc.add("encode", time.Since(t0), iters)
	payload := padRecord(b, 2048)
	key := h.prefix + ":ovh:task"
	stream := h.prefix + ":ovh:events"
	defer h.rdb.Del(context.WithoutCancel(ctx), key, stream)
	t0 = time.Now()
	for range iters {
		if err := h.rdb.HSet(ctx, key, "result", payload).Err(); err != nil {
			return err
		}
	}
	acc.add("hset", time.Since(t0), iters)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	t0 = time.Now()
	for i := range iters {
		err := h.rdb.XAdd(ctx, &redis.XAddArgs{
			Stream: stream, MaxLen: 100000, Approx: true,
			Values: []any{"run_id", fmt.Sprintf("%s-%d", h.prefix, i), "task_id", "0b0e5a3c-4bd8-4bb4-8a9e-7c0b4f1f9a11",
				"state", "completed", "verdict", "ok", "approval_id", "", "time", now},
		}).Err()
		if err != nil {
			return err
		}
	}
	acc.add("xadd", time.Since(t0), iters)
	h.logf("  overhead: round %d done (%d iterations)", round+1, iters)
	return nil
}

// padRecord pads an encoded record to size bytes with spaces (still JSON).
func padRecord(b []byte, size int) []byte {
	if len(b) >= size {
		return b
	}
	return append(b, strings.Repeat(" ", size-len(b))...)
}

// SampleRecord is a typical run record: one ok step of the trivial
// workload, as the worker stores it.
func SampleRecord() *record.Run {
	code := 0
	now := time.Now().UTC()
	return &record.Run{
		TaskID: "0b0e5a3c-4bd8-4bb4-8a9e-7c0b4f1f9a11", RunID: "bench-00000000-tp-trivial-c2-airlock-1-42",
		Queue: "bench-00000000-tp-trivial-c2-airlock-1", State: record.StateCompleted, Verdict: record.VerdictOK,
		StartedAt: now, FinishedAt: now.Add(3 * time.Millisecond), DurationMS: 3.1, Attempt: 1, MaxRetry: 3,
		Worker: "bench-host/12345 0.1.0-dev",
		Isolation: record.Isolation{Mode: "strict", User: "uid per slot from 200000", UID: 200001,
			Network: "network namespace (loopback only)", Landlock: "abi 7 (writes only in the workspace, tcp denied, signals and abstract sockets scoped)",
			Quota: "tmpfs per workspace", Tree: "pid namespace (kill -1 from its init)", Rlimits: "prlimit while stopped at exec (ptrace)"},
		Limits:    limits.DefaultPolicy().Default,
		Workspace: record.Workspace{QuotaBytes: 64 << 20, UsedBytes: 4096},
		Steps: []record.Step{{Name: "true", Argv: []string{"/bin/true"}, ExitCode: &code, Verdict: record.VerdictOK,
			DurationMS: 1.2, CPUMS: 0.4, MaxRSSKB: 1840}},
	}
}
