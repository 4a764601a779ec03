//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// helperArg is argv[1] of a slot helper: the worker re-execs its own binary
// with it, and the binary's main calls MaybeHelper first thing. The
// helper's configuration comes over its control socket (fd 3), not argv,
// so that /proc/1/cmdline shows steps nothing of the host.
const helperArg = "__airlock_slot_helper"

// helperConfig is the first message of the worker to a new helper.
type helperConfig struct {
	UID       int    `json:"uid"`        // -1: keep the worker's identity
	GID       int    `json:"gid"`        //
	Workspace string `json:"workspace"`  // host path of the slot's workspace, the only tree steps may write
	Namespace bool   `json:"namespaces"` // PID 1 of new pid+mount+ipc+uts(+net) namespaces
	NetNS     bool   `json:"net_ns"`     // a new network namespace (loopback only)
	Egress    bool   `json:"egress"`     // listen on the proxy port, hand connections to the worker
	Landlock  bool   `json:"landlock"`
	UserNS    bool   `json:"user_ns"` // root of a new user namespace: drop capabilities for steps
	View      bool   `json:"view"`    // with Namespace: build the view and pivot_root into it
	Binds     []Bind `json:"binds,omitempty"`
	// IDMap: the user namespace of the view's idmapping came as
	// descriptor 4 (hostsockets.go); else NoIDMap says why none did.
	IDMap   bool   `json:"idmap,omitempty"`
	NoIDMap string `json:"no_idmap,omitempty"`
	// Cgroups is how many descriptors of the slot's cgroup came with this
	// message (see cgroup.Group.Join): with CgroupThread, tasks files the
	// spawner thread joins once, so that steps are born in the group;
	// without, cgroup.procs files every step is moved into before it
	// starts.
	Cgroups      int  `json:"cgroups,omitempty"`
	CgroupThread bool `json:"cgroup_thread,omitempty"`
}

// init keeps a helper's main goroutine on the main thread from the start
// (Go runs main on the main thread when an init locks it): locked only in
// helperMain, the goroutine could have moved to another thread by then,
// leaving the main thread free for the spawner's goroutine, which must
// not run there (enterSlotCgroup). Seen under load: the step failed with
// "the spawner runs on the main thread".
func init() {
	if len(os.Args) >= 2 && os.Args[1] == helperArg {
		runtime.LockOSThread()
	}
}

// MaybeHelper runs the slot helper and exits when the process was started
// as one. Otherwise it marks every descriptor above stderr that the process
// inherited close-on-exec, so that none reaches a helper or a step, and
// returns. A binary that embeds a worker must call it at the top of main,
// before flags are parsed.
func MaybeHelper() {
	maybeIDMapHolder()
	if len(os.Args) < 2 || os.Args[1] != helperArg {
		markInheritedCloexec()
		return
	}
	if err := helperMain(); err != nil {
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
	ipc    *ipcSweeper   // nil without an IPC namespace of our own
	base   *baseline     // what steps must not change of the helper (tamper.go)
	cgroup []int         // cgroup.procs of the slot's group, one per hierarchy
	idmap  int           // the idmapping's user namespace until setup is over, or -1
	// cgroupErr says why the spawner thread could not join the slot's
	// group (enterSlotCgroup); the spawner then refuses every step.
	cgroupErr string

	mu      sync.Mutex
	current *stepRun // the step running now, for cancel
	// running is true from a run request until its answer is sent;
	// cancelPending (killPending) records a cancel (kill) that came
	// while the step was still being started (no current yet), for run
	// to apply once it exists.
	running, cancelPending, killPending bool
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

func helperMain() error {
	// The main goroutine keeps the main thread: no other goroutine, the
	// spawner's above all, runs there. The spawner's thread may join the
	// slot's cgroup, and the main thread's group is where the helper's own
	// memory is charged.
	runtime.LockOSThread()
	// One P: the helper's work is one step at a time, and with a second
	// P each wake-up of a goroutine also woke a spinning thread to look
	// for more (cmd/bench: about 0.2 ms less CPU per trivial task).
	runtime.GOMAXPROCS(1)
	// Whatever the worker inherited without close-on-exec came along;
	// close it before anything else (3 is the control socket, 4 the
	// idmapping's user namespace when the config says so: takeIDMap).
	idmapHeld := holdIDMap()
	closeInherited(idmapFD + 1)
	// A step runs as our uid: no signal it sends may end us (signals.go).
	if err := guardSignals(); err != nil {
		return err
	}
	f := os.NewFile(3, "control")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	h := &helper{conn: c.(*net.UnixConn), spawns: make(chan spawnReq)}
	fds, err := readMsg(h.conn, &h.cfg)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	want := h.cfg.Cgroups
	if h.cfg.Egress {
		want++
	}
	if len(fds) != want {
		return fmt.Errorf("config came with %d descriptors, want %d", len(fds), want)
	}
	h.idmap = h.takeIDMap(idmapHeld)
	h.cgroup = fds[:h.cfg.Cgroups]
	// The spawner's thread enters the slot's cgroup first, while we still
	// have the worker's privileges, then waits for setup to confine itself.
	entered, setupDone, ready := make(chan struct{}), make(chan Status, 1), make(chan Status, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the helper
		h.enterSlotCgroup()
		close(entered)
		h.spawner(<-setupDone, ready)
	}()
	<-entered
	st, err := h.setup()
	if h.idmap >= 0 {
		unix.Close(h.idmap) // before any step is forked
	}
	if err != nil {
		_ = writeMsg(h.conn, hello{Error: err.Error()}, nil)
		return err
	}
	if h.cfg.Egress {
		if err := startEgress(fds[h.cfg.Cgroups]); err != nil {
			_ = writeMsg(h.conn, hello{Error: err.Error()}, nil)
			return err
		}
	}
	if h.base, err = takeBaseline(); err != nil {
		_ = writeMsg(h.conn, hello{Error: err.Error()}, nil)
		return err
	}
	setupDone <- st
	if err := writeMsg(h.conn, hello{Status: <-ready}, nil); err != nil {
		return err
	}
	// The main thread stays locked to this goroutine, idle: the requests
	// are served on unlocked goroutines, which the runtime wakes on any
	// thread, instead of handing the main thread its P for every message.
	served := make(chan error, 1)
	go func() { served <- h.serve() }()
	return <-served
}

// setup runs while the helper still has the worker's privileges (or, in a
// user namespace, every capability of it). It returns the tiers it put in
// place; the spawner thread adds its own.
func (h *helper) setup() (Status, error) {
	st := Status{
		Root:        "off: no mount namespace (steps see the host's filesystem, as Landlock allows)",
		IPC:         "host ipc namespace: SysV and POSIX queue calls denied by seccomp",
		Descriptors: "closed: steps get only stdin, stdout and stderr",
		Workdir:     h.cfg.Workspace,
	}
	if h.cfg.Namespace {
		// Nothing we mount propagates to the host, nothing of the host's
		// reaches us.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return st, fmt.Errorf("make / private: %w", err)
		}
		st.Root = "off: disabled (steps see the host's filesystem, as Landlock allows)"
		if h.cfg.View {
			uid, gid := h.cfg.UID, h.cfg.GID
			if uid < 0 {
				uid, gid = os.Geteuid(), os.Getegid()
			}
			desc, err := buildView(viewConfig{
				Workspace: h.cfg.Workspace, Base: parentDir(h.cfg.Workspace),
				UID: uid, GID: gid, Binds: h.cfg.Binds, IDMapFD: h.idmap, NoIDMap: h.cfg.NoIDMap,
			})
			if err != nil {
				return st, fmt.Errorf("build the steps' root: %w", err)
			}
			st.Root, st.Workdir = desc, Workdir
		} else if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			// A /proc of our own PID namespace: steps see only their own processes.
			return st, fmt.Errorf("mount /proc: %w", err)
		}
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return st, fmt.Errorf("sethostname: %w", err)
		}
		sw, err := newIPCSweeper()
		if err != nil {
			return st, fmt.Errorf("ipc: %w", err)
		}
		h.ipc = sw
		st.IPC = "ipc namespace per slot; SysV objects and POSIX queues removed after each step"
	}
	if h.cfg.NetNS {
		if err := loopbackUp(); err != nil {
			return st, fmt.Errorf("bring up loopback: %w", err)
		}
	}
	if h.cfg.UID >= 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return st, fmt.Errorf("setgroups: %w", err)
		}
		// The saved gid is not the steps' gid: the kernel lets a process
		// change another's rlimits (prlimit) only when all its uids and
		// gids match, and a step could otherwise set ours (RLIMIT_CPU at
		// 0: SIGKILL from the kernel, which no handler stops; RLIMIT_AS:
		// the runtime cannot allocate). Signals, which check uids only,
		// are handled (signals.go); a step's own saved gid is its gid
		// again from its exec.
		if err := syscall.Setresgid(h.cfg.GID, h.cfg.GID, savedGID(h.cfg.GID)); err != nil {
			return st, fmt.Errorf("setgid %d: %w", h.cfg.GID, err)
		}
		if err := syscall.Setresuid(h.cfg.UID, h.cfg.UID, h.cfg.UID); err != nil {
			return st, fmt.Errorf("setuid %d: %w", h.cfg.UID, err)
		}
	}
	// Not dumpable: a step of the same uid cannot ptrace us or read our
	// memory or descriptors through /proc. Changing uid cleared the
	// parent-death signal; set it again.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return st, fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return st, fmt.Errorf("PR_SET_PDEATHSIG: %w", err)
	}
	if !h.cfg.Namespace {
		// Without a PID namespace, orphans a step leaves come to us so that
		// we can find and kill them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return st, fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
		}
	}
	return st, nil
}

// startEgress listens on the proxy port of the slot's network namespace
// and hands each connection a step makes to the worker over fd, as a
// descriptor: the worker serves the proxy; nothing here reads the bytes.
func startEgress(fd int) error {
	f := os.NewFile(uintptr(fd), "egress")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("egress socket: %w", err)
	}
	uc := c.(*net.UnixConn)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", egressPort))
	if err != nil {
		return fmt.Errorf("egress listener: %w", err)
	}
	go func() {
		defer ln.Close()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			cf, err := conn.(*net.TCPConn).File()
			conn.Close()
			if err != nil {
				continue
			}
			_, _, err = uc.WriteMsgUnix([]byte{0}, unix.UnixRights(int(cf.Fd())), nil)
			cf.Close()
			if err != nil {
				return // the worker is gone
			}
		}
	}()
	return nil
}

// parentDir is the directory the view's root is mounted on: the
// workspace's parent, a directory of the worker's (the slot directory).
func parentDir(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
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
			h.mu.Lock()
			h.running, h.cancelPending, h.killPending = false, false, false
			h.mu.Unlock()
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
			return nil // the worker closed the socket or is gone: nothing to report to
		}
		switch req.Op {
		case "run":
			if req.Run == nil || len(fds) != 3 || len(req.Run.Argv) == 0 {
				// The worker always sends argv and three descriptors: a
				// request without them means the helper cannot receive
				// them any more (its descriptor limit was changed, say).
				// Exit: the slot starts a new helper and the worker
				// retries, instead of a final verdict for the step.
				h.killAll()
				return fmt.Errorf("bad run request: %d descriptors", len(fds))
			}
			h.mu.Lock()
			h.running, h.cancelPending, h.killPending = true, false, false
			h.mu.Unlock()
			runs <- spawnReq{req: req.Run, fds: fds}
		case "cancel":
			// The worker sends a cancel only while it waits for a run's
			// answer: one that comes while the step is being started is
			// kept for run, one that comes after the answer was sent is
			// about a step that is over.
			h.mu.Lock()
			if s := h.current; s != nil {
				s.stop(true)
			} else if h.running {
				h.cancelPending = true
			}
			h.mu.Unlock()
		case "kill":
			// The step wrote more than limits.output_total: its whole
			// tree dies now, without a grace; like a cancel, one that
			// comes after the answer is about a step that is over.
			h.mu.Lock()
			if s := h.current; s != nil {
				s.kill()
			} else if h.running {
				h.killPending = true
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

// kill sends SIGKILL to everything the step started, at once; the step
// is neither timed out nor canceled (the worker knows why it asked).
func (s *stepRun) kill() {
	_ = unix.Kill(-s.pid, unix.SIGKILL)
	s.h.signalAll()
}

// stop sends SIGTERM to the step's process group, then SIGKILL to
// everything the step started once the grace has passed.
func (s *stepRun) stop(cancel bool) {
	s.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock() // run reads killT under it
		if cancel {
			s.canceled = true
		} else {
			s.timedOut = true
		}
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
	if h.cancelPending {
		s.stop(true) // canceled while it was being started
	}
	if h.killPending {
		s.kill()
	}
	h.mu.Unlock()
	deadline := time.AfterFunc(time.Duration(req.TimeoutNS), func() { s.stop(false) })

	var resp runResponse
	var ws unix.WaitStatus
	var ru unix.Rusage
	if err := reap(sr.pid, &ws, &ru); err != nil {
		resp.StartError = "wait: " + err.Error()
	}
	resp.DurationNS = int64(time.Since(start))
	deadline.Stop()
	h.mu.Lock()
	h.current = nil
	h.mu.Unlock()
	// The step is over when its first process exits: whatever it left
	// behind (background jobs, setsid, double forks) is killed now, and
	// then the IPC objects it made.
	resp.Killed = h.killAll()
	if h.ipc != nil {
		if err := h.ipc.sweep(); err != nil {
			resp.Leftover = err.Error()
		}
	}
	if what := h.base.check(); what != "" {
		resp.Leftover = joinWhat(resp.Leftover, what)
	}
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

func joinWhat(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
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

// errNoSpawner is returned for every step of a helper whose spawner
// thread could not be confined.
var errNoSpawner = errors.New("slot helper could not confine its spawner thread")

// egressPort is where a networked slot's steps find the worker's proxy
// (egress.Port).
const egressPort = 3128
