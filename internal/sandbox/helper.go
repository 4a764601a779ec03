package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// helperArg is argv[1] of a slot helper: the worker re-execs its own binary
// with it, and the binary's main calls MaybeHelper first thing.
const helperArg = "__airlock_slot_helper"

// helperConfig is argv[2] of a helper.
type helperConfig struct {
	UID       int    `json:"uid"`        // -1: keep the worker's identity
	GID       int    `json:"gid"`        //
	SlotDir   string `json:"slot_dir"`   // the only tree steps may write
	Namespace bool   `json:"namespaces"` // PID 1 of new pid+mount(+net) namespaces
	NetNS     bool   `json:"net_ns"`     // a new network namespace (loopback only)
	Network   bool   `json:"network"`    // the operator allowed network for these steps
	Landlock  bool   `json:"landlock"`
	UserNS    bool   `json:"user_ns"` // root of a new user namespace: drop capabilities for steps
}

// MaybeHelper runs the slot helper and exits when the process was started
// as one; otherwise it returns at once. A binary that embeds a worker must
// call it at the top of main, before flags are parsed.
func MaybeHelper() {
	if len(os.Args) < 3 || os.Args[1] != helperArg {
		return
	}
	if err := helperMain(os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "airlock slot helper: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type helper struct {
	cfg    helperConfig
	conn   *net.UnixConn
	spawns chan spawnReq // served by the locked, confined spawner thread
	wmu    sync.Mutex    // serialises writes on conn

	mu      sync.Mutex
	current *stepRun // the step running now, for cancel
}

type spawnReq struct {
	req   *runRequest
	fds   []int
	reply chan spawnResult
}

type spawnResult struct {
	pid int
	err error
}

func helperMain(arg string) error {
	var cfg helperConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// A step runs as our uid; keep it from ending us with a signal. A
	// namespace's init gets, from inside, only the signals it handles;
	// these are caught and dropped. Notify rather than Ignore: a caught
	// signal is reset to its default in a forked child, an ignored one
	// would stay ignored in every step (SIGXCPU, SIGTERM...).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
		syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSYS)
	go func() {
		for range sigs {
		}
	}()
	f := os.NewFile(3, "control")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	h := &helper{cfg: cfg, conn: c.(*net.UnixConn), spawns: make(chan spawnReq)}
	if err := h.setup(); err != nil {
		_ = writeMsg(h.conn, hello{Error: err.Error()}, nil)
		return err
	}
	ready := make(chan string, 1)
	go h.spawner(ready)
	if err := writeMsg(h.conn, hello{Landlock: <-ready}, nil); err != nil {
		return err
	}
	return h.serve()
}

// setup runs while the helper still has the worker's privileges.
func (h *helper) setup() error {
	if h.cfg.Namespace {
		// Receive the worker's later mounts (per-task tmpfs), send none back.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("make / a slave mount: %w", err)
		}
		// A /proc of our own PID namespace: steps see only their own processes.
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount /proc: %w", err)
		}
	}
	if h.cfg.NetNS {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bring up loopback: %w", err)
		}
	}
	if h.cfg.UID >= 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setresgid(h.cfg.GID, h.cfg.GID, h.cfg.GID); err != nil {
			return fmt.Errorf("setgid %d: %w", h.cfg.GID, err)
		}
		if err := syscall.Setresuid(h.cfg.UID, h.cfg.UID, h.cfg.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", h.cfg.UID, err)
		}
	}
	// Not dumpable: a step of the same uid cannot ptrace us or read our
	// memory or descriptors through /proc. Changing uid cleared the
	// parent-death signal; set it again.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_PDEATHSIG: %w", err)
	}
	if !h.cfg.Namespace {
		// Without a PID namespace, orphans a step leaves come to us so that
		// we can find and kill them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// spawner owns one OS thread for the helper's life. That thread alone is
// confined (no_new_privs, Landlock) and forks every step, so each step
// inherits the confinement; being the tracer of the steps it forks, it also
// applies their rlimits while they are stopped at exec.
func (h *helper) spawner(ready chan<- string) {
	runtime.LockOSThread() // never unlocked: the thread dies with the helper
	status := "off: disabled by the operator"
	var nnpErr error
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		nnpErr = err
		status = "off: no_new_privs: " + err.Error()
	}
	if h.cfg.UserNS && nnpErr == nil {
		if err := dropThreadCaps(); err != nil {
			ready <- "off: cannot drop capabilities: " + err.Error()
			for sr := range h.spawns {
				sr.reply <- spawnResult{0, errors.New("slot helper could not drop capabilities")}
			}
			return
		}
	}
	if h.cfg.Landlock && nnpErr == nil {
		status = restrictThread(h.cfg.SlotDir, !h.cfg.Network)
	}
	ready <- status
	for sr := range h.spawns {
		pid, err := spawnStopped(sr.req, sr.fds)
		sr.reply <- spawnResult{pid, err}
	}
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

// spawnStopped forks and execs the step with PTRACE_TRACEME, waits for the
// stop that follows a successful execve, applies the rlimits with prlimit(2)
// and lets it run: the limits are in force before the program's first
// instruction. It must run on the spawner thread.
func spawnStopped(req *runRequest, fds []int) (int, error) {
	files := []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
	pid, err := syscall.ForkExec(req.Path, req.Argv, &syscall.ProcAttr{
		Dir:   req.Dir,
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
	threads := countThreads()
	for _, rl := range req.Rlimits {
		cur, max := rl.Cur, rl.Max
		if rl.Resource == unix.RLIMIT_NPROC {
			cur += uint64(threads)
			max += uint64(threads)
		}
		if err := unix.Prlimit(pid, rl.Resource, &unix.Rlimit{Cur: cur, Max: max}, nil); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			_ = unix.PtraceDetach(pid)
			_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
			return 0, fmt.Errorf("prlimit %d: %w", rl.Resource, err)
		}
	}
	if err := unix.PtraceDetach(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		return 0, fmt.Errorf("ptrace detach: %w", err)
	}
	return pid, nil
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

func (h *helper) send(v any) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return writeMsg(h.conn, v, nil)
}

// serve reads requests until the worker closes the socket (or dies).
func (h *helper) serve() error {
	runs := make(chan spawnReq)
	defer close(runs)
	go func() {
		for r := range runs {
			resp := h.run(r.req, r.fds)
			if err := h.send(resp); err != nil {
				os.Exit(1)
			}
		}
	}()
	for {
		var req request
		fds, err := readMsg(h.conn, &req)
		if err != nil {
			h.killAll()
			if errors.Is(err, net.ErrClosed) || err.Error() == "EOF" {
				return nil
			}
			return nil // the worker is gone: nothing to report to
		}
		switch req.Op {
		case "run":
			if req.Run == nil || len(fds) != 3 {
				for _, fd := range fds {
					unix.Close(fd)
				}
				_ = h.send(runResponse{StartError: "bad run request"})
				continue
			}
			runs <- spawnReq{req: req.Run, fds: fds}
		case "cancel":
			h.mu.Lock()
			if s := h.current; s != nil {
				s.stop(true)
			}
			h.mu.Unlock()
		}
	}
}

// stepRun is a step in flight: its deadline and how it was stopped.
type stepRun struct {
	h        *helper
	pid      int
	grace    time.Duration
	once     sync.Once
	timedOut bool
	canceled bool
	mu       sync.Mutex
	killT    *time.Timer
}

// stop sends SIGTERM to the step's process group, then SIGKILL to
// everything the step started once the grace has passed.
func (s *stepRun) stop(cancel bool) {
	s.once.Do(func() {
		s.mu.Lock()
		if cancel {
			s.canceled = true
		} else {
			s.timedOut = true
		}
		s.mu.Unlock()
		_ = unix.Kill(-s.pid, unix.SIGTERM)
		s.killT = time.AfterFunc(s.grace, func() {
			_ = unix.Kill(-s.pid, unix.SIGKILL)
			s.h.signalAll() // reaping is run's job, after the step's own wait4
		})
	})
}

func (h *helper) run(req *runRequest, fds []int) runResponse {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	reply := make(chan spawnResult, 1)
	start := time.Now()
	h.spawns <- spawnReq{req: req, fds: fds, reply: reply}
	sr := <-reply
	for _, fd := range fds {
		unix.Close(fd)
	}
	fds = nil
	if sr.err != nil {
		return runResponse{StartError: sr.err.Error(), DurationNS: int64(time.Since(start))}
	}
	s := &stepRun{h: h, pid: sr.pid, grace: time.Duration(req.GraceNS)}
	h.mu.Lock()
	h.current = s
	h.mu.Unlock()
	deadline := time.AfterFunc(time.Duration(req.TimeoutNS), func() { s.stop(false) })

	var resp runResponse
	var ws unix.WaitStatus
	var ru unix.Rusage
	for {
		_, err := unix.Wait4(sr.pid, &ws, 0, &ru)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			resp.StartError = "wait: " + err.Error()
		}
		break
	}
	resp.DurationNS = int64(time.Since(start))
	deadline.Stop()
	h.mu.Lock()
	h.current = nil
	h.mu.Unlock()
	// The step is over when its first process exits: whatever it left
	// behind (background jobs, setsid, double forks) is killed now.
	resp.Killed = h.killAll()
	s.mu.Lock()
	resp.TimedOut, resp.Canceled = s.timedOut, s.canceled
	if s.killT != nil {
		s.killT.Stop()
	}
	s.mu.Unlock()
	resp.Exited = ws.Exited()
	if resp.Exited {
		resp.ExitCode = ws.ExitStatus()
	}
	if ws.Signaled() {
		resp.Signal = int(ws.Signal())
	}
	resp.UtimeUS = ru.Utime.Usec + ru.Utime.Sec*1e6
	resp.StimeUS = ru.Stime.Usec + ru.Stime.Sec*1e6
	resp.MaxRSSKB = ru.Maxrss
	return resp
}

// killAll kills every process the steps left and reaps them; it returns how
// many it reaped. In a PID namespace kill(-1) reaches exactly the
// namespace's processes (all of them ours); without one, it walks our
// children (we are their subreaper) until none is left.
func (h *helper) killAll() int {
	n := 0
	for round := 0; round < 100000; round++ {
		h.signalAll()
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return n // ECHILD: nothing left
		}
		n++
	}
	return n
}

// signalAll sends SIGKILL to every process the steps left, reaping none.
func (h *helper) signalAll() {
	if h.cfg.Namespace {
		_ = unix.Kill(-1, unix.SIGKILL)
		return
	}
	for _, pid := range children() {
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// children lists the direct children of every thread of this process.
func children() []int {
	var out []int
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/children")
		if err != nil {
			continue
		}
		var pid int
		for _, c := range b {
			if c >= '0' && c <= '9' {
				pid = pid*10 + int(c-'0')
			} else if pid > 0 {
				out = append(out, pid)
				pid = 0
			}
		}
		if pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}
