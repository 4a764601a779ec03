//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// spawner owns one OS thread for the helper's life. That thread alone is
// confined (its own session keyring, no_new_privs, no capabilities in a
// user namespace, Landlock, the seccomp filter) and forks every step, so
// each step inherits the confinement from its first instruction; being the
// tracer of the steps it forks, it also applies their rlimits while they
// are stopped at exec. The helper's other threads keep what they need to
// sweep IPC objects and kill processes.
func (h *helper) spawner(st Status, ready chan<- Status) {
	runtime.LockOSThread() // never unlocked: the thread dies with the helper
	fail := func(why string) {
		ready <- st
		for sr := range h.spawns {
			sr.reply <- spawnResult{0, fmt.Errorf("%w: %s", errNoSpawner, why)}
		}
	}
	// Keys: a fresh, empty session keyring instead of the one inherited
	// from whatever started the worker (a step would possess it), and
	// nothing left in a slot uid's own keyrings by an earlier task.
	st.Keys = joinSessionKeyring(h.cfg.UID >= 0 && !h.cfg.UserNS)
	st.Landlock = "off: disabled by the operator"
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		st.Landlock = "off: no_new_privs: " + err.Error()
		st.Seccomp = "off: no_new_privs: " + err.Error()
		fail("no_new_privs: " + err.Error())
		return
	}
	if h.cfg.UserNS {
		if err := dropThreadCaps(); err != nil {
			fail("cannot drop capabilities: " + err.Error())
			return
		}
	}
	if h.cfg.Landlock {
		rules := landlockRules{Writable: []string{st.Workdir}, Devices: devices, DenyTCP: true}
		if h.cfg.Egress {
			rules.ConnectPort = egressPort
		}
		if st.Workdir == Workdir {
			rules.Readable = []string{"/"} // the view is all there is
		} else {
			rules.Readable = hostReadable(h.cfg.Binds, st.Workdir)
		}
		st.Landlock = restrictThread(rules)
	}
	if h.cgroupErr != "" {
		// This thread joins the slot's cgroup before setup
		// (enterSlotCgroup): every step it forks is born in the group.
		fail(h.cgroupErr)
		return
	}
	st.Seccomp = installSeccomp(h.ipc == nil)
	if strings.HasPrefix(st.Seccomp, "off") {
		st.Keys = "off: no seccomp filter (" + st.Keys + ")"
		if h.ipc == nil {
			st.IPC = "off: host ipc namespace and no seccomp filter"
		}
	}
	ready <- st
	for sr := range h.spawns {
		cg := h.cgroup
		if h.cfg.CgroupThread {
			cg = nil // steps are born in the group
		}
		pid, err := spawnStopped(sr.req, sr.fds, stepDir(st.Workdir, sr.req.Dir), cg, int(h.base.threads.Load()))
		sr.reply <- spawnResult{pid, err}
	}
}

// stepDir is the directory a step starts in: rel (checked by the spec,
// clean and relative, no "..") below the workspace as the step sees it.
// The chdir is the step's own, as its uid, in its view and under its
// Landlock domain: a link there leads nowhere the step could not cd to.
func stepDir(workdir, rel string) string {
	if rel == "" || rel == "." || strings.HasPrefix(rel, "/") || strings.Contains("/"+rel+"/", "/../") {
		return workdir
	}
	return workdir + "/" + rel
}

// joinSessionKeyring gives the calling thread a new anonymous session
// keyring and, when clearOwn (the uid is the slot's own, not the
// operator's), empties the uid's user and user-session keyrings. It
// returns the Keys status.
func joinSessionKeyring(clearOwn bool) string {
	status := "key calls denied (seccomp); own empty session keyring"
	if _, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
		status = "key calls denied (seccomp); session keyring inherited (join: " + errno.Error() + ")"
	}
	if clearOwn {
		for _, kr := range []int{unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_USER_SESSION_KEYRING} {
			if _, err := unix.KeyctlInt(unix.KEYCTL_CLEAR, kr, 0, 0, 0); err != nil {
				return status + "; the slot uid's keyrings could not be cleared: " + err.Error()
			}
		}
		status += "; the slot uid's keyrings cleared at start"
	}
	return status
}

// dropThreadCaps empties this thread's capability sets, bounding set
// included, and locks root out of regaining them at exec: a helper that is
// root of its user namespace forks steps that hold no capability.
func dropThreadCaps() error {
	const secbits = 0x2f // SECBIT_NOROOT|_LOCKED, SECBIT_NO_SETUID_FIXUP|_LOCKED, SECBIT_KEEP_CAPS_LOCKED
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// spawnStopped finds the step's program, forks and execs it with
// PTRACE_TRACEME, waits for the stop that follows a successful execve,
// applies the rlimits with prlimit(2), moves it into the slot's cgroup
// (each of cgroup is a cgroup.procs descriptor) and lets it run: the
// limits are in force before the program's first instruction. It must run on the
// spawner thread: the lookup is then made as the step would make it, as
// the slot's uid, in the step's view, under its Landlock domain. threads
// is how many threads the helper has (0: count them now): they run as the
// step's uid, so its RLIMIT_NPROC is raised by as many.
func spawnStopped(req *runRequest, fds []int, dir string, cgroup []int, threads int) (int, error) {
	path, err := lookPath(req.Argv[0], dir, envValue(req.Env, "PATH"))
	if err != nil {
		return 0, err
	}
	files := []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
	pid, err := syscall.ForkExec(path, req.Argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   req.Env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Ptrace: true},
	})
	if err != nil {
		return 0, err
	}
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, unix.WALL, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("wait for exec stop: %w", err)
	}
	if !ws.Stopped() {
		// It died before its first instruction (killed from outside).
		return 0, fmt.Errorf("step ended before it started: %v", describeStatus(ws))
	}
	abort := func(err error) (int, error) {
		_ = unix.Kill(pid, unix.SIGKILL)
		_ = unix.PtraceDetach(pid)
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		return 0, err
	}
	for _, rl := range req.Rlimits {
		cur, max := rl.Cur, rl.Max
		if rl.Resource == unix.RLIMIT_NPROC {
			if threads <= 0 {
				threads = countThreads()
			}
			cur += uint64(threads)
			max += uint64(threads)
		}
		if err := unix.Prlimit(pid, rl.Resource, &unix.Rlimit{Cur: cur, Max: max}, nil); err != nil {
			return abort(fmt.Errorf("prlimit %d: %w", rl.Resource, err))
		}
	}
	if len(cgroup) > 0 {
		id := []byte(strconv.Itoa(pid))
		for _, fd := range cgroup {
			if _, err := unix.Write(fd, id); err != nil {
				// Never run a step outside the group whose limits it
				// was promised.
				return abort(fmt.Errorf("join the slot's cgroup: %w", err))
			}
		}
	}
	if err := unix.PtraceDetach(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		return 0, fmt.Errorf("ptrace detach: %w", err)
	}
	return pid, nil
}

// lookPath resolves a step's program: a name with a slash is taken
// relative to the workspace, a bare name is searched in the step's PATH.
// A directory the step cannot search is as good as absent: a program is
// either found or "not found", with nothing said of why.
func lookPath(name, dir, path string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q", name, path)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// countThreads counts the tasks of this process: they run as the step's
// uid, so RLIMIT_NPROC must leave room for them.
func countThreads() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 64
	}
	return len(ents)
}

func describeStatus(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit code %d", ws.ExitStatus())
	case ws.Signaled():
		return "signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("status %#x", uint32(ws))
}
