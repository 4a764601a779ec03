//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tmpfs"
)

// Micro-benchmarks of a task's hot path, configured as the worker
// configures each piece: go test -run XXX -bench . ./internal/bench

// fixture is a workspace manager, a slot's workspace and the uid steps run
// as: a leased slot uid with tmpfs workspaces as root, the caller's uid and
// plain directories otherwise.
type fixture struct {
	mgr      *tmpfs.Manager
	area     *tmpfs.Slot
	uid, gid int
	slot     sandbox.SlotConfig
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	dir := tb.TempDir()
	// Steps run as the slot uid and must reach their workspaces.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			tb.Fatal(err)
		}
	}
	root := os.Geteuid() == 0
	mgr, err := tmpfs.New(filepath.Join(dir, "root"), root)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mgr.Close() })
	f := &fixture{mgr: mgr, uid: os.Geteuid(), gid: os.Getegid(),
		slot: sandbox.SlotConfig{UID: -1, GID: -1, Landlock: true, Grace: 500 * time.Millisecond, Stderr: os.Stderr}}
	name := "slot-bench"
	if root {
		lease, err := sandbox.LeaseUID(filepath.Join(os.TempDir(), "airlock-bench-uids"), uidFirst, uidCount)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { lease.Release() })
		f.uid, f.gid = lease.UID, lease.UID
		f.slot.UID, f.slot.GID, f.slot.Namespaces, f.slot.View = lease.UID, lease.UID, true, true
		name = fmt.Sprintf("slot-%d", lease.UID)
	}
	if f.area, err = mgr.Slot(name, f.uid, f.gid); err != nil {
		tb.Fatal(err)
	}
	f.slot.Workspace = f.area.Dir()
	return f
}

// workspace readies the slot's workspace for one benchmark.
func (f *fixture) workspace(tb testing.TB) *tmpfs.Workspace {
	tb.Helper()
	ws, err := f.area.Create(int64(limits.DefaultPolicy().Default.Workspace))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ws.Remove() })
	return ws
}

// BenchmarkWorkspaceCreateRemove is a task's workspace: create (a remount
// of the slot's tmpfs as root), write the spec's files, remove (empty).
func BenchmarkWorkspaceCreateRemove(b *testing.B) {
	f := newFixture(b)
	files := map[string]string{"gen.sh": scriptSh}
	quota := int64(limits.DefaultPolicy().Default.Workspace)
	b.ResetTimer()
	for b.Loop() {
		ws, err := f.area.Create(quota)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ws.WriteFiles(files); err != nil {
			b.Fatal(err)
		}
		if err := ws.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTempDirCreateRemove is the baseline's equivalent.
func BenchmarkTempDirCreateRemove(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		d, err := os.MkdirTemp(dir, "t-")
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range []string{"in", "out", "tmp"} {
			if err := os.Mkdir(filepath.Join(d, s), 0o700); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "gen.sh"), []byte(scriptSh), 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSlotRunTrue is one step through a slot's helper: fork, ptrace
// stop at exec, prlimit, run, wait, sweep.
func BenchmarkSlotRunTrue(b *testing.B) {
	benchSlotRun(b, nil, "/bin/true")
}

// benchSlotRun runs argv through a slot's helper once per iteration, in a
// workspace holding files.
func benchSlotRun(b *testing.B, files map[string]string, argv ...string) {
	f := newFixture(b)
	box, err := sandbox.NewSlot(f.slot)
	if err != nil {
		b.Fatal(err)
	}
	defer box.Close()
	ws := f.workspace(b)
	if _, err := ws.WriteFiles(files); err != nil {
		b.Fatal(err)
	}
	step := sandbox.Step{Argv: argv, Limits: limits.DefaultPolicy().Default, Timeout: 10 * time.Second}
	ctx := context.Background()
	for b.Loop() {
		res, err := box.Run(ctx, step)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Exited || res.ExitCode != 0 {
			b.Fatalf("%+v", res)
		}
	}
}

// BenchmarkExecTrue is the bare fork/exec the baseline does per step.
func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSlotStart is the once-per-slot cost of a helper.
func BenchmarkSlotStart(b *testing.B) {
	f := newFixture(b)
	for b.Loop() {
		s, err := sandbox.NewSlot(f.slot)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkRecordEncode is json.Marshal of a typical run record.
func BenchmarkRecordEncode(b *testing.B) {
	rec := SampleRecord()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadResult reads a 1 KiB result from a workspace.
func BenchmarkReadResult(b *testing.B) {
	f := newFixture(b)
	ws := f.workspace(b)
	if _, err := ws.WriteFiles(map[string]string{"out/result.json": ResultJSON}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := contract.ReadResult(ws, "out/result.json", 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSchemaValidateCached is Compile (a cache hit after the first)
// and Validate of a 1 KiB result, as the worker does per run.
func BenchmarkSchemaValidateCached(b *testing.B) {
	schema, doc := []byte(ResultSchema), []byte(ResultJSON)
	if _, err := contract.Compile(schema); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := contract.Compile(schema)
		if err != nil {
			b.Fatal(err)
		}
		vs, err := s.Validate(doc)
		if err != nil || len(vs) > 0 {
			b.Fatal(err, vs)
		}
	}
}

// BenchmarkSchemaCompileUncached compiles a schema never seen before.
func BenchmarkSchemaCompileUncached(b *testing.B) {
	stamp := time.Now().UnixNano()
	for i := 0; b.Loop(); i++ {
		fresh := []byte(fmt.Sprintf(`{"$comment":"b %d-%d",%s`, stamp, i, ResultSchema[1:]))
		if _, err := contract.Compile(fresh); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSlotRunScript is the script workload's step through a slot's
// helper: sh, which forks cat for the here-document, writing out/result.json
// in the workspace.
func BenchmarkSlotRunScript(b *testing.B) {
	benchSlotRun(b, map[string]string{"gen.sh": scriptSh}, "sh", "gen.sh")
}

// BenchmarkExecScript is the same script run bare, as the baseline runs it.
func BenchmarkExecScript(b *testing.B) {
	d := b.TempDir()
	if err := os.Mkdir(filepath.Join(d, "out"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "gen.sh"), []byte(scriptSh), 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c := exec.Command("sh", "gen.sh")
		c.Dir = d
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
	}
}
