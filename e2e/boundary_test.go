//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/google/go-cmp/cmp"
)

// The sandbox boundary, tried as an attacker would: what a step can see,
// reach and keep. Each test fails on a worker without the boundary (host
// filesystem visible, inherited descriptors, no IPC sweep, no seccomp).

// probeLines runs the probe with checks in one step and returns its output
// as check → result ("ok" or an errno name).
func (b *bundle) probe(checks ...string) (map[string]string, *record.Run) {
	b.t.Helper()
	argv := append([]string{"/opt/airlock-probe/probe"}, checks...)
	rec := b.run(fmt.Sprintf(`{"version": 1, "steps": [{"run": %s}]}`, mustJSON(b.t, argv)))
	st := stepOf(b.t, rec, 0)
	if st.Verdict != record.VerdictOK {
		b.t.Fatalf("probe did not run:\n%s", mustJSON(b.t, rec))
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(st.Stdout), "\n") {
		l = strings.TrimPrefix(l, "connect ")
		if k, v, ok := strings.Cut(l, " "); ok {
			out[k] = v
		}
	}
	return out, rec
}

// TestViewRoot: the root a step sees holds the system directories, a
// generated /etc, a minimal /dev, its /proc, its workspace and the
// operator's binds: nothing else of the host.
func TestViewRoot(t *testing.T) {
	t.Parallel()
	b := setup(t, probeBind(t)...)
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "ls -A /; echo --; ls -A /dev; echo --; ls -A /etc; echo --; id -un; pwd; echo $HOME $TMPDIR; readlink /tmp"]}]}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictOK {
		t.Fatalf("step failed:\n%s", mustJSON(t, rec))
	}
	parts := strings.Split(st.Stdout, "--\n")
	if len(parts) != 4 {
		t.Fatalf("stdout %q", st.Stdout)
	}
	var wantRoot []string
	for _, d := range []string{"bin", "lib", "lib32", "lib64", "libx32", "sbin", "usr"} {
		if _, err := os.Lstat("/" + d); err == nil {
			wantRoot = append(wantRoot, d)
		}
	}
	wantRoot = append(wantRoot, "dev", "etc", "opt", "proc", "tmp", "workspace")
	slices.Sort(wantRoot)
	if diff := cmp.Diff(wantRoot, strings.Fields(parts[0])); diff != "" {
		t.Errorf("ls / (-want +got):\n%s", diff)
	}
	wantDev := []string{"fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom", "zero"}
	if diff := cmp.Diff(wantDev, strings.Fields(parts[1])); diff != "" {
		t.Errorf("ls /dev (-want +got):\n%s", diff)
	}
	etc := strings.Fields(parts[2])
	for _, never := range []string{"shadow", "gshadow", "sudoers", "mysql", "postgresql", "redis", "ssh", "machine-id", "pip.conf", "npmrc"} {
		if slices.Contains(etc, never) {
			t.Errorf("/etc/%s is visible: %q", never, etc)
		}
	}
	for _, want := range []string{"passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache"} {
		if !slices.Contains(etc, want) {
			t.Errorf("/etc/%s missing: %q", want, etc)
		}
	}
	if want := "airlock\n/workspace\n/workspace /workspace/tmp\n/workspace/tmp\n"; parts[3] != want {
		t.Errorf("identity and paths %q, want %q", parts[3], want)
	}
	if !strings.HasPrefix(rec.Isolation.Root, "pivot_root") || !strings.Contains(rec.Isolation.Root, "/opt/airlock-probe") {
		t.Errorf("record's root tier %q does not name the view and its bind", rec.Isolation.Root)
	}
}

// TestHostFilesUnreadable: another run's published result in the store, a
// world-readable file under the host's /tmp, the worker binary: a step can
// neither read nor list them.
func TestHostFilesUnreadable(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	published := filepath.Join(store, "run-1", "result.json")
	if err := os.MkdirAll(filepath.Dir(published), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(published, []byte(`{"api_key": "sk-airlock-secret"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	hostTmp := filepath.Join(os.TempDir(), fmt.Sprintf("airlock-host-%d.txt", time.Now().UnixNano()))
	if err := os.WriteFile(hostTmp, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hostTmp) })
	b := setup(t, "-store", store)
	// The view's /tmp is the workspace's tmp/: the host's is not listed.
	rec := b.run(`{"version": 1, "steps": [{"run": ["ls", "-A", "/tmp/"]}]}`)
	if out := stepOf(t, rec, 0).Stdout; out != "" {
		t.Errorf("ls /tmp lists %q, want the workspace's empty tmp/", out)
	}
	for _, p := range []string{published, filepath.Dir(published), store, hostTmp, bin.worker, "/root", "/home", "/var", "/run"} {
		rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "cat ` + p + ` 2>&1; ls -A ` + p + ` 2>&1; true"]}]}`)
		out := stepOf(t, rec, 0).Stdout
		if strings.Contains(out, "secret") || !strings.Contains(out, "No such file or directory") {
			t.Errorf("%s: the step saw %q", p, out)
		}
	}
}

// TestHostSocketsUnreachable: a unix socket of the host's in a 0777
// directory, PostgreSQL's and MariaDB's sockets: a step connects to none.
func TestHostSocketsUnreachable(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "airlock-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o777)
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	targets := []string{sock}
	for _, s := range []string{"/var/run/postgresql/.s.PGSQL.5432", "/run/mysqld/mysqld.sock", "/var/run/redis/redis-server.sock"} {
		if c, err := net.Dial("unix", s); err == nil { // reachable from the host: a meaningful target
			c.Close()
			targets = append(targets, s)
		}
	}
	b := setup(t, probeBind(t)...)
	var checks []string
	for _, s := range targets {
		checks = append(checks, "connect="+s)
	}
	got, rec := b.probe(checks...)
	for _, s := range targets {
		if got[s] != "ENOENT" {
			t.Errorf("connect %s: %q, want ENOENT (not in the view)\n%s", s, got[s], mustJSON(t, rec))
		}
	}
	select {
	case <-accepted:
		t.Fatal("the host's listener accepted a connection from a step")
	case <-time.After(100 * time.Millisecond):
	}
	t.Logf("host sockets tried: %q", targets)
}

// TestInheritedDescriptors: descriptors the worker inherited (a root-only
// file open for reading, another open for appending) reach no step.
func TestInheritedDescriptors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret, appendTo := filepath.Join(dir, "secret"), filepath.Join(dir, "log")
	for _, p := range []string{secret, appendTo} {
		if err := os.WriteFile(p, []byte("root only\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a, err := os.OpenFile(appendTo, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := setupInherit(t, []*os.File{r, a}, probeBind(t)...)
	_, rec := b.probe("fds")
	if st := stepOf(t, rec, 0); st.Stdout != "fd 0\nfd 1\nfd 2\n" {
		t.Errorf("the step's descriptors:\n%s\nwant only 0, 1, 2", st.Stdout)
	}
	rec = b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "cat <&3; echo pwned >&4; ls /proc/self/fd"]}]}`)
	if out := stepOf(t, rec, 0).Stdout; strings.Contains(out, "root only") {
		t.Errorf("a step read the worker's descriptor: %q", out)
	}
	if data, _ := os.ReadFile(appendTo); string(data) != "root only\n" {
		t.Errorf("a step wrote through the worker's descriptor: %q", data)
	}
}

// TestNothingKeptAcrossTasks: SysV shared memory, semaphores, message
// queues and POSIX queues one task makes are gone in the next task on the
// same slot (one slot: the same helper, the same IPC namespace), and the
// host's shared memory did not grow.
func TestNothingKeptAcrossTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, append(probeBind(t), "-concurrency", "1")...)
	made, rec1 := b.probe("shm-make", "sem-make", "msg-make", "mq-make")
	for _, c := range []string{"shm-make", "sem-make", "msg-make"} {
		if made[c] != "ok" {
			t.Fatalf("%s: %q (the step may use IPC within its namespace)\n%s", c, made[c], mustJSON(t, rec1))
		}
	}
	// POSIX queues live on the namespace's mqueue filesystem, outside
	// every path Landlock allows: opening one is denied. Without Landlock
	// they are made, and swept like the others.
	if made["mq-make"] != "EACCES" {
		t.Errorf("mq-make: %q, want EACCES (Landlock)", made["mq-make"])
	}
	found, rec2 := b.probe("shm-find", "sem-find", "msg-find")
	if rec1.Isolation.UID != rec2.Isolation.UID {
		t.Fatalf("the tasks ran on different slots: uid %d and %d", rec1.Isolation.UID, rec2.Isolation.UID)
	}
	for _, c := range []string{"shm-find", "sem-find", "msg-find"} {
		if found[c] != "ENOENT" {
			t.Errorf("%s in the next task: %q, want ENOENT", c, found[c])
		}
	}
	host, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(string(host)), fmt.Sprintf("%d", 0x41495243)) {
		t.Errorf("the probe's segment is in the host's IPC namespace:\n%s", host)
	}
}

// TestKeyringsCleared: a key left in a slot uid's keyring (by an earlier
// worker, or anything running as that uid) is gone once a worker starts on
// that uid, and no step can add one.
func TestKeyringsCleared(t *testing.T) {
	t.Parallel()
	needRoot(t) // and seeding the key runs the probe as the slot's uid
	uid := 371000 + int(time.Now().UnixNano()%900)
	if err := addUserKey(uid); err != nil {
		t.Fatalf("seed a key for uid %d: %v", uid, err)
	}
	if n, err := userKeys(uid); err != nil || n == 0 {
		t.Fatalf("seeded key not found for uid %d: %d keys, %v", uid, n, err)
	}
	r := fmt.Sprintf("%d-%d", uid, uid)
	b := setup(t, append(probeBind(t), "-concurrency", "1", "-uid-range", r, "-uid-lock-dir", t.TempDir())...)
	got, rec := b.probe("add_key", "keyctl-read-user", "request_key")
	if rec.Isolation.UID != uid {
		t.Fatalf("ran as uid %d, want %d", rec.Isolation.UID, uid)
	}
	for _, c := range []string{"add_key", "keyctl-read-user", "request_key"} {
		if got[c] != "EPERM" {
			t.Errorf("%s: %q, want EPERM", c, got[c])
		}
	}
	if n, err := userKeys(uid); err != nil || n != 0 {
		t.Errorf("uid %d's keyring after the worker started: %d keys (err %v), want none", uid, n, err)
	}
}

// TestSyscallFilter: the calls the filter denies fail with EPERM (clone3
// with ENOSYS, for the C library to fall back to clone), the calls
// programs need still work, and a call of another ABI kills the process.
func TestSyscallFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, probeBind(t)...)
	want := map[string]string{
		"unshare-user": "EPERM", "unshare-net": "EPERM", "clone-newns": "EPERM", "setns": "EPERM",
		"mount": "EPERM", "pivot_root": "EPERM", "open_tree": "EPERM", "fsopen": "EPERM",
		"add_key": "EPERM", "io_uring_setup": "EPERM", "bpf": "EPERM", "userfaultfd": "EPERM",
		"perf_event_open": "EPERM", "personality-exec": "EPERM", "socket-vsock": "EPERM",
		"socket-packet": "EPERM", "socket-netlink-netfilter": "EPERM", "socket-vsock-highbits": "EPERM",
		"socket-mptcp": "EPERM", "socket-mptcp6": "EPERM", "socket-mptcp-highbits": "EPERM",
		"clone3": "ENOSYS",
		// what programs need
		"unshare-files": "ok", "fork": "ok", "personality-query": "ok", "socket-inet": "ok",
		"socket-unix": "ok", "socket-netlink-route": "ok",
	}
	var checks []string
	for c := range want {
		checks = append(checks, c)
	}
	slices.Sort(checks)
	got, rec := b.probe(checks...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("probe results (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(rec.Isolation.Seccomp, "airlock-default: ") {
		t.Errorf("record's seccomp tier %q", rec.Isolation.Seccomp)
	}
	// unshare(1) as a program would run it.
	rec = b.run(`{"version": 1, "steps": [{"run": ["unshare", "-U", "true"]}]}`)
	if st := stepOf(t, rec, 0); st.Verdict != record.VerdictExit || !strings.Contains(st.Stderr, "Operation not permitted") {
		t.Errorf("unshare -U: %s", mustJSON(t, st))
	}
	if rec.Isolation.Seccomp == "" {
		t.Error("no seccomp tier in the record")
	}
	// The i386 ABI, from a 64-bit process: killed, not filtered by the
	// wrong table.
	if isAMD64() {
		// A kernel without i386 emulation (ia32_emulation=0, some VMs)
		// refuses int 0x80 itself with SIGSEGV, before seccomp sees it:
		// then that is what the sandbox must show too.
		want := "SIGSYS"
		host := exec.Command(filepath.Join(bin.probeDir, "probe"), "int80")
		if out, err := host.Output(); err != nil && strings.Contains(err.Error(), "segmentation fault") {
			want = "SIGSEGV"
			t.Logf("this kernel refuses int 0x80 outside the sandbox too (%v %q)", err, out)
		}
		rec = b.run(`{"version": 1, "steps": [{"run": ["/opt/airlock-probe/probe", "int80"]}]}`)
		if st := stepOf(t, rec, 0); st.Signal != want || strings.Contains(st.Stdout, "returned") {
			t.Errorf("int 0x80: want the process killed by %s:\n%s", want, mustJSON(t, st))
		}
	}
}

// TestMountinfoPrivate: a step's mount table names no other task, no other
// slot and nothing of the host's workspace root.
func TestMountinfoPrivate(t *testing.T) {
	t.Parallel()
	b := setup(t, "-concurrency", "2")
	ctx := context.Background()
	other, err := b.client.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["sleep", "3"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the other task holds its slot
	rec := b.run(`{"version": 1, "steps": [{"run": ["cat", "/proc/self/mountinfo"]}]}`)
	mi := stepOf(t, rec, 0).Stdout
	for _, leak := range []string{other.TaskID, rec.TaskID, b.root, "slot-"} {
		if strings.Contains(mi, leak) {
			t.Errorf("mountinfo names %q:\n%s", leak, mi)
		}
	}
	if !strings.Contains(mi, " /workspace ") {
		t.Errorf("mountinfo has no /workspace:\n%s", mi)
	}
	b.wait(other.TaskID)
}

// TestLookupInView: a program in a 0700 host directory is "not found",
// with the same message as one that exists nowhere.
func TestLookupInView(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "airlock-private-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "secretprog"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o700)
	b := setup(t)
	msg := func(name string) string {
		rec := b.run(`{"version": 1, "steps": [{"run": ["` + name + `"], "env": {"PATH": "` + dir + `:/usr/bin"}}]}`)
		st := stepOf(t, rec, 0)
		if st.Verdict != record.VerdictExecError {
			t.Fatalf("%s: want exec_error:\n%s", name, mustJSON(t, rec))
		}
		return strings.ReplaceAll(st.Error, name, "NAME")
	}
	if hidden, absent := msg("secretprog"), msg("nosuchprog"); hidden != absent {
		t.Errorf("a hidden program and an absent one differ:\n%q\n%q", hidden, absent)
	}
	rec := b.run(`{"version": 1, "steps": [{"run": ["` + dir + `/secretprog"]}]}`)
	rec2 := b.run(`{"version": 1, "steps": [{"run": ["` + dir + `/nosuchprog"]}]}`)
	e1 := strings.ReplaceAll(stepOf(t, rec, 0).Error, "secretprog", "NAME")
	e2 := strings.ReplaceAll(stepOf(t, rec2, 0).Error, "nosuchprog", "NAME")
	if e1 != e2 || !strings.Contains(e1, "no such file") {
		t.Errorf("absolute paths: %q vs %q", e1, e2)
	}
}

// TestNetworkRecordHonest: a run with network: true says what it had: its
// own namespace, the proxy and the one TCP port Landlock lets it connect.
func TestNetworkRecordHonest(t *testing.T) {
	t.Parallel()
	b := setup(t, "-allow-network")
	rec := b.run(`{"version": 1, "network": true, "steps": [{"run": ["true"]}]}`)
	if !strings.Contains(rec.Isolation.Landlock, "connect to port 3128") || !strings.Contains(rec.Isolation.Network, "own network namespace") ||
		!strings.Contains(rec.Isolation.Network, "nothing (no -egress-allow)") || strings.Contains(rec.Isolation.Network, "host network") {
		t.Errorf("network run's record: %s", mustJSON(t, rec.Isolation))
	}
	rec = b.run(`{"version": 1, "steps": [{"run": ["true"]}]}`)
	if !strings.Contains(rec.Isolation.Landlock, "tcp denied") {
		t.Errorf("a run without network: %s", mustJSON(t, rec.Isolation))
	}
}

// TestBindWithSocketRefused: a -ro-bind source that holds a unix socket is
// refused at start: a step could connect to it.
func TestBindWithSocketRefused(t *testing.T) {
	t.Parallel()
	needRoot(t)
	dir, err := os.MkdirTemp("", "airlock-bind-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b := &bundle{t: t, url: redistest.URL(t)}
	code, _, stderr := b.runBin(bin.worker, "", "-ro-bind", dir+":/opt/x", "-workspace-root", t.TempDir())
	if code == 0 || !strings.Contains(stderr, "unix socket") {
		t.Errorf("worker with a socket in a bind: exit %d, stderr %q", code, stderr)
	}
}

// addUserKey adds a key to uid's user keyring, as a process of that uid.
func addUserKey(uid int) error {
	out, err := asUID(uid, "add_key")
	if err == nil && !strings.Contains(out, "add_key ok") {
		err = fmt.Errorf("probe: %s", out)
	}
	return err
}

// userKeys counts the keys in uid's user keyring, as a process of that uid.
func userKeys(uid int) (int, error) {
	out, err := asUID(uid, "keyctl-read-user")
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(out, "keyctl-read-user ok %d", &n); err != nil {
		return 0, fmt.Errorf("probe: %q", out)
	}
	return n / 4, nil // KEYCTL_READ of a keyring: its key ids, 4 bytes each
}

// asUID runs the probe on the host as uid.
func asUID(uid int, check string) (string, error) {
	if bin.probeDir == "" {
		return "", fmt.Errorf("no probe: %s", bin.probeErr)
	}
	cmd := exec.Command(filepath.Join(bin.probeDir, "probe"), check)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func isAMD64() bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var b []byte
	for _, c := range u.Machine {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b) == "x86_64"
}
