package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/limits"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	MaybeHelper()
	goleak.VerifyTestMain(m)
}

// setup starts a slot in the strongest mode this process can have, with a
// workspace dir owned by the slot's uid.
func setup(t *testing.T) (*Slot, string) {
	t.Helper()
	root := t.TempDir()
	_ = os.Chmod(filepath.Dir(root), 0o711)
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	cfg := SlotConfig{UID: -1, GID: -1, SlotDir: root, Landlock: true, Stderr: os.Stderr, Grace: 200 * time.Millisecond}
	if os.Geteuid() == 0 {
		lease, err := LeaseUID(filepath.Join(os.TempDir(), "airlock-test-uids"), 300000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lease.Release() })
		cfg.UID, cfg.GID, cfg.Namespaces = lease.UID, lease.UID, true
	}
	ws := filepath.Join(root, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if cfg.UID >= 0 {
		if err := os.Chown(ws, cfg.UID, cfg.GID); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ws
}

func step(ws string, argv ...string) Step {
	lim := limits.DefaultPolicy().Default
	return Step{Argv: argv, Dir: ws, Limits: lim, Timeout: 10 * time.Second}
}

func TestRunEcho(t *testing.T) {
	s, ws := setup(t)
	r, err := s.Run(context.Background(), step(ws, "sh", "-c", "echo hello; id -u; echo err >&2; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v landlock=%s", r, s.Landlock())
	if !r.Exited || r.ExitCode != 3 {
		t.Fatalf("want exit 3, got %+v", r)
	}
	lines := strings.Fields(string(r.Stdout.Data))
	if len(lines) != 2 || lines[0] != "hello" {
		t.Fatalf("stdout %q", r.Stdout.Data)
	}
	if os.Geteuid() == 0 && lines[1] == "0" {
		t.Fatalf("step ran as root")
	}
	if string(r.Stderr.Data) != "err\n" {
		t.Fatalf("stderr %q", r.Stderr.Data)
	}
}

func TestRunTimeoutKillsTree(t *testing.T) {
	s, ws := setup(t)
	st := step(ws, "sh", "-c", "sleep 1000 & setsid sleep 1001 & sleep 1002")
	st.Timeout = 300 * time.Millisecond
	r, err := s.Run(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut {
		t.Fatalf("want timeout, got %+v", r)
	}
	if r.Signal != syscall.SIGTERM && r.Signal != syscall.SIGKILL {
		t.Fatalf("signal %v", r.Signal)
	}
}

func BenchmarkRunTrue(b *testing.B) {
	t := &testing.T{}
	_ = t
	root := b.TempDir()
	os.Chmod(filepath.Dir(root), 0o711)
	os.Chmod(root, 0o711)
	cfg := SlotConfig{UID: -1, GID: -1, SlotDir: root, Landlock: true, Stderr: os.Stderr}
	if os.Geteuid() == 0 {
		lease, err := LeaseUID(filepath.Join(os.TempDir(), "airlock-test-uids"), 300000, 1000)
		if err != nil {
			b.Fatal(err)
		}
		defer lease.Release()
		cfg.UID, cfg.GID, cfg.Namespaces = lease.UID, lease.UID, true
	}
	s, err := NewSlot(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st := step(root, "/bin/true")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := s.Run(context.Background(), st)
		if err != nil || r.ExitCode != 0 || !r.Exited {
			b.Fatal(err, r)
		}
	}
}
