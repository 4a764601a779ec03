//go:build linux

package sandbox

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestUserNamespace runs a slot the way a worker that is not root does:
// the test binary re-runs itself as nobody (uid 65534) for
// TestUserNamespaceChild.
func TestUserNamespace(t *testing.T) {
	if os.Getenv("AIRLOCK_USERNS_CHILD") != "" {
		t.Skip("in the child")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to become another user; TestUserNamespaceChild runs directly for a non-root user")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	bin := filepath.Join(dir, "sandbox.test")
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, self); err != nil {
		t.Fatal(err)
	}
	out.Close()
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o777)
	cmd := exec.Command(bin, "-test.run", "^TestUserNamespaceChild$", "-test.v")
	cmd.Env = []string{"AIRLOCK_USERNS_CHILD=1", "TMPDIR=" + tmp, "PATH=/usr/bin:/bin"}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	t.Logf("%s", b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "--- PASS: TestUserNamespaceChild") {
		t.Fatal("the child did not run the test")
	}
}

// TestUserNamespaceChild checks what a non-root worker's steps get: a
// network namespace with only loopback, a PID namespace, no capabilities,
// Landlock, a view of their own (the minimal tree, the workspace at
// /workspace) and no way to write outside it.
func TestUserNamespaceChild(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("run by TestUserNamespace as a non-root user")
	}
	cfg := SlotConfig{UID: -1, GID: -1, Workspace: filepath.Join(t.TempDir(), "ws"), Namespaces: true, UserNS: true, View: true, Landlock: true, Stderr: os.Stderr}
	mkWorkspace(t, cfg)
	s, err := NewSlot(cfg)
	if err != nil {
		t.Skipf("no user namespace here: %v", err)
	}
	defer s.Close()
	script := `grep -c : /proc/net/dev; tr '\0' ' ' < /proc/1/cmdline | cut -d' ' -f2; grep CapEff /proc/self/status; echo x > /usr/airlock-userns-escape 2>/dev/null || echo denied; pwd; ls -A / | tr '\n' ' '`
	r, err := s.Run(context.Background(), step("sh", "-c", script))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(r.Stdout.Data)), "\n")
	var root []string
	for _, d := range []string{"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr", "workspace"} {
		if _, err := os.Lstat("/" + d); err == nil || d == "workspace" {
			root = append(root, d)
		}
	}
	want := []string{"1", helperArg, "CapEff:\t0000000000000000", "denied", Workdir, strings.Join(root, " ")}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q (stderr %q, landlock %s)", lines, want, r.Stderr.Data, s.Landlock())
	}
	// The step owns /proc/loadavg's file here (root of the namespace):
	// only its read-only mount keeps it from rewriting it.
	r, err = s.Run(context.Background(), step("sh", "-c", "chmod 666 /proc/loadavg || echo refused; echo 9 > /proc/loadavg || echo refused; cat /proc/loadavg"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(r.Stdout.Data), "refused\nrefused\n"+procLoadavg; got != want {
		t.Errorf("/proc/loadavg: %q, want %q (stderr %q)", got, want, r.Stderr.Data)
	}
	// No idmapped mounts in a user namespace: the record says so.
	if root := s.Status().Root; !strings.HasSuffix(root, "; unix sockets the host makes in its trees reachable (no idmapped mounts in a user namespace: the worker is not root)") {
		t.Errorf("root tier %q", root)
	}
}
