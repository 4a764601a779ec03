package contract_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/contract"
)

// TestChildConfinement: from inside a validation child, what a step may
// not do fails: opening a file, a socket, a new process, ptrace, a signal;
// as root the child runs as the uid it was given, in a PID namespace of
// its own, and Landlock holds for the whole process (it executed itself
// again from its domain).
func TestChildConfinement(t *testing.T) {
	c := &contract.Child{UID: -1, GID: -1}
	root := os.Geteuid() == 0
	if root {
		// The slot's uid must be able to execute the binary: a copy in
		// a directory it may enter.
		dir := t.TempDir()
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		exe := filepath.Join(dir, "child")
		copyFile(t, "/proc/self/exe", exe)
		c = &contract.Child{Path: exe, UID: 65534, GID: 65534}
	}
	got, err := contract.Probe(c, time.Now().Add(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", got)
	for _, k := range []string{"open", "open_proc", "tcp", "unix_socket", "fork", "raw_fork", "kill_1", "ptrace"} {
		if v := got[k]; v == "ok" || v == "" {
			t.Errorf("%s from a validation child: %q, want it denied", k, v)
		}
	}
	if v := got["open"]; !strings.Contains(v, "operation not permitted") {
		t.Errorf("open: %q, want EPERM (seccomp)", v)
	}
	if root {
		if got["uid"] != "65534" || got["pid"] != "1" {
			t.Errorf("uid %s, pid %s; want 65534, 1 (own PID namespace)", got["uid"], got["pid"])
		}
	}
	if contract.LandlockABI() > 0 && !strings.Contains(got["args"], "landlocked") {
		t.Errorf("args %q: the child did not execute itself from its Landlock domain", got["args"])
	}
	if d := c.Describe(); !strings.Contains(d, "seccomp") || (root && !strings.Contains(d, "namespaces")) {
		t.Errorf("Describe() = %q", d)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
