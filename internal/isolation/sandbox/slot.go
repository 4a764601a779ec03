//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/internal/isolation/cgroup"
	"github.com/airlock-run/airlock/limits"
	"golang.org/x/sys/unix"
)

// SlotConfig says how a slot confines its steps.
type SlotConfig struct {
	UID, GID int // the slot's identity; -1 keeps the worker's
	// Workspace is the slot's workspace directory on the host: the only
	// tree steps may write, and their working directory. With View, its
	// parent directory (a directory of the worker's) is where the helper
	// mounts the view's root, in its own mount namespace only.
	Workspace  string
	Namespaces bool // PID, mount, IPC, UTS (and network) namespaces; needs root, or UserNS
	UserNS     bool // with Namespaces: inside a new user namespace, for a worker that is not root
	View       bool // with Namespaces: steps see a root of their own (see view.go), the workspace at Workdir
	Binds      []Bind
	Landlock   bool
	// Egress, when set, gives the slot's steps a way out: they keep their
	// network namespace (loopback only), where the helper listens on
	// 127.0.0.1:egress.Port and hands every connection to Egress, the
	// worker's proxy; Landlock lets steps connect to that port and no
	// other. It needs Namespaces. Egress is called on the goroutine that
	// receives the connections, one at a time, and must not block: it
	// refuses a connection at once or serves it in a goroutine of its
	// own, so that one refused is closed before the next is received.
	// Cgroup, when set, is the slot's control group: each step is moved
	// into it before its first instruction, its memory and processes are
	// limited there (not by RLIMIT_AS and RLIMIT_NPROC), and its peak and
	// OOM kills are read from it.
	Cgroup *cgroup.Group
	Egress func(net.Conn)
	// Restarted, when set, is called each time the slot starts a helper
	// after its first (one died, a step changed it, a workspace could not
	// be emptied): for metrics.
	Restarted func()
	Stderr    io.Writer     // where helpers' own diagnostics go; nil discards
	Grace     time.Duration // SIGTERM to SIGKILL; default 500ms
}

// Status says which confinement a slot's helper put in place, one field
// per tier, each a mechanism or "off: <reason>".
type Status struct {
	Root        string `json:"root"`
	Landlock    string `json:"landlock"`
	Seccomp     string `json:"seccomp"`
	IPC         string `json:"ipc"`
	Keys        string `json:"keys"`
	Descriptors string `json:"descriptors"`
	// Workdir is where steps see their workspace: Workdir with a view,
	// the host path without.
	Workdir string `json:"workdir"`
}

// Slot runs one step at a time through its helper.
type Slot struct {
	cfg SlotConfig

	mu      sync.Mutex // one step at a time
	cmd     *exec.Cmd
	conn    *net.UnixConn
	status  Status
	done    chan struct{} // closed when the helper exits
	devnull *os.File
	started bool // a helper was started before
	renewed bool // the next helper follows a move to a fresh memory group, not a restart
}

// Step is one program to run in the slot's workspace, which is its
// working directory and HOME; TMPDIR is its tmp/.
type Step struct {
	Argv    []string
	Env     map[string]string // the spec's variables
	Stdin   string
	Limits  limits.Set // resolved
	Timeout time.Duration
	// Dir is the directory the step starts in, relative to the
	// workspace, clean and without ".." (tasks.CheckPath); "": the
	// workspace itself.
	Dir string
	// Live, when set, is given every byte the step's captures keep, as
	// they read it (stream Stdout or Stderr; p is only valid during the
	// call), from the capture's goroutine: what the record will keep,
	// while the step runs.
	Live func(stream int, p []byte)
	// Keep, when set, is the run's budget of kept output: every byte
	// kept of stdout or stderr is taken from it, on top of the cap of
	// Limits.Output per stream; nil means no budget but that cap.
	Keep *KeepBudget
}

// Result is what became of a step.
type Result struct {
	StartError string // the program could not be started
	Exited     bool
	ExitCode   int
	Signal     syscall.Signal // 0 unless killed by a signal
	TimedOut   bool           // the worker killed it at its deadline
	Canceled   bool           // the worker killed it because the run was canceled
	// OutputLimit is true when the step wrote more than
	// Limits.OutputTotal to stdout and stderr together: the worker
	// killed its whole tree at once (neither TimedOut nor Canceled).
	OutputLimit bool
	Duration    time.Duration
	CPU         time.Duration
	MaxRSSKB    int64
	// MemoryPeak is the peak of the slot's cgroup during the step, in
	// bytes (0 without a cgroup); OOMKills counts the step's processes the
	// kernel killed at the cgroup's memory limit.
	MemoryPeak int64
	OOMKills   int64
	// PidsRefused counts the forks the slot's pids limit refused during
	// the step; -1 when unknown (no cgroup, or no pids.events).
	PidsRefused int64
	// PidsHitBy and OOMHitBy bound when, after the step's start, the pids
	// limit first refused a fork and the memory limit first killed: a
	// poll every HitPoll saw it by then (0: not seen while the step ran,
	// or no cgroup).
	PidsHitBy, OOMHitBy time.Duration
	Killed              int // processes left behind and killed when the step ended
	Stdout              Capture
	Stderr              Capture
}

// Streams of a step, for Step.Live.
const (
	Stdout = 1
	Stderr = 2
)

// Capture is one output stream: the first bytes up to the cap, and how many
// the step wrote in all (up to the kill, past Limits.OutputTotal).
type Capture struct {
	Data      []byte
	Total     int64
	Truncated bool
	live      func([]byte) // Step.Live of this stream, while it is read
}

// NewSlot starts a slot's helper.
func NewSlot(cfg SlotConfig) (*Slot, error) {
	if cfg.Grace <= 0 {
		cfg.Grace = 500 * time.Millisecond
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	s := &Slot{cfg: cfg, devnull: devnull}
	if err := s.start(); err != nil {
		devnull.Close()
		return nil, err
	}
	return s, nil
}

// Status returns the tiers the slot's helper put in place.
func (s *Slot) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Landlock is the helper's Landlock status: "abi N (...)" or "off: why".
func (s *Slot) Landlock() string { return s.Status().Landlock }

// Restart stops the slot's helper; the next Run starts a new one, with new
// namespaces. The worker calls it when a workspace could not be emptied.
func (s *Slot) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
}

// freshGroup moves the slot's steps to the spare memory group of its
// cgroup when the current one holds more than cgroup.StaleBytes that
// earlier steps left (page cache, kernel memory; see cgroup.Group.Stale),
// so that the step's memory peak is its own. The helper is replaced: its
// spawner thread is in the group, and the steps' cgroup namespace is
// rooted there. That is not a restart for Restarted. A failure costs the
// figures their precision, not the step: it is logged.
func (s *Slot) freshGroup() {
	stale, err := s.cfg.Cgroup.Stale()
	if err != nil {
		fmt.Fprintf(s.stderr(), "airlock slot: %v\n", err)
	}
	if !stale {
		return
	}
	s.stop()
	if err := s.cfg.Cgroup.Renew(); err != nil {
		fmt.Fprintf(s.stderr(), "airlock slot: memory peaks include what earlier steps left: %v\n", err)
	}
	s.renewed = true
}

// stop ends the helper, and with it every process of its namespace.
func (s *Slot) stop() {
	if s.conn == nil {
		return
	}
	s.conn.Close()
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.conn, s.cmd = nil, nil
}

// Close stops the helper; every process of the slot ends with it.
func (s *Slot) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop()
	return s.devnull.Close()
}

// Run runs one step and waits for it and everything it started to end.
// Cancelling ctx stops the step (SIGTERM, SIGKILL after the grace) and
// returns a Result with Canceled set. An error means the slot failed, not
// the step; the slot restarts its helper on the next Run. When the helper
// died during the step (ErrHelperDied), the Result still holds what the
// step wrote on stdout and stderr.
func (s *Slot) Run(ctx context.Context, st Step) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		select {
		case <-s.done: // died since the last step (a step may kill its own helper)
			s.stop()
		default:
		}
	}
	if s.cfg.Cgroup != nil {
		s.freshGroup()
	}
	if s.conn == nil {
		if err := s.start(); err != nil {
			return Result{}, err
		}
	}
	if len(st.Argv) == 0 {
		return Result{StartError: "empty argv"}, nil
	}
	cg := s.cfg.Cgroup
	req := &runRequest{
		Argv: st.Argv, Env: buildEnv(st, s.status.Workdir),
		Rlimits:   rlimitsOf(st.Limits, 0, cg != nil),
		TimeoutNS: int64(st.Timeout), GraceNS: int64(s.cfg.Grace), Dir: st.Dir,
	}
	var mark cgroup.Mark
	if cg != nil {
		if err := cg.Set(int64(st.Limits.Memory), st.Limits.Processes); err != nil {
			return Result{}, err
		}
		var err error
		if mark, err = cg.Mark(); err != nil {
			return Result{}, err
		}
	}

	stdin := s.devnull
	var stdinW *os.File
	if st.Stdin != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return Result{}, err
		}
		defer r.Close()
		stdin, stdinW = r, w
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return Result{}, err
	}
	cap := int64(st.Limits.Output)
	total := newOutputTotal(int64(st.Limits.OutputTotal))
	var outC, errC Capture
	var wg sync.WaitGroup
	wg.Add(2)
	var liveOut, liveErr func([]byte)
	if st.Live != nil {
		liveOut = func(p []byte) { st.Live(Stdout, p) }
		liveErr = func(p []byte) { st.Live(Stderr, p) }
	}
	go func() { defer wg.Done(); outC = capture(outR, cap, st.Keep, total, liveOut) }()
	go func() { defer wg.Done(); errC = capture(errR, cap, st.Keep, total, liveErr) }()
	err = writeMsg(s.conn, request{Op: "run", Run: req}, []int{int(stdin.Fd()), int(outW.Fd()), int(errW.Fd())})
	outW.Close()
	errW.Close()
	if stdinW != nil {
		go func() { _, _ = io.WriteString(stdinW, st.Stdin); stdinW.Close() }()
	}
	if err != nil {
		s.stop()
		total.finish()
		wg.Wait()
		return Result{}, fmt.Errorf("%w: %v", ErrHelperDied, err)
	}
	// The helper enforces the step's deadline; the worker enforces it too,
	// later, on the helper: a step that starved its helper of CPU (its
	// threads' scheduling is the step's uid's to change) cannot stretch
	// its deadline, nor a shutdown.
	var hard <-chan time.Time
	if st.Timeout > 0 {
		t := time.NewTimer(st.Timeout + s.cfg.Grace + 2*time.Second)
		defer t.Stop()
		hard = t.C
	}
	var hits *hitClock
	if cg != nil {
		hits = watchHits(cg, mark)
	}
	resp, err := s.await(ctx, total.tripped(), hard)
	total.finish() // the step is over: the captures drain its pipes
	pidsBy, oomBy := hits.stop()
	if err != nil {
		s.stop() // its namespace dies with it: nothing of the step survives
		wg.Wait()
		// What the step wrote before its helper died is kept, for the
		// record: a step that ends its helper does not erase its tracks.
		return Result{StartError: err.Error(), OutputLimit: total.exceeded(), Stdout: outC, Stderr: errC}, err
	}
	wg.Wait()
	var usage cgroup.Usage
	if cg != nil {
		if usage, err = cg.Usage(mark); err != nil {
			return Result{}, err
		}
	}
	if resp.Leftover != "" {
		// IPC objects the sweep could not remove: a new helper, with a
		// new IPC namespace, for the next step.
		fmt.Fprintf(s.stderr(), "airlock slot: replacing the helper: %s\n", resp.Leftover)
		s.stop()
	}
	return Result{
		StartError: resp.StartError,
		Exited:     resp.Exited, ExitCode: resp.ExitCode, Signal: syscall.Signal(resp.Signal),
		TimedOut: resp.TimedOut, Canceled: resp.Canceled, OutputLimit: total.exceeded(),
		Duration: time.Duration(resp.DurationNS),
		CPU:      time.Duration(resp.UtimeUS+resp.StimeUS) * time.Microsecond,
		MaxRSSKB: resp.MaxRSSKB, Killed: resp.Killed,
		MemoryPeak: usage.PeakBytes, OOMKills: usage.OOMKills, PidsRefused: pidsRefused(cg, usage),
		PidsHitBy: pidsBy, OOMHitBy: oomBy,
		Stdout: outC, Stderr: errC,
	}, nil
}

// pidsRefused is what usage says of refused forks, -1 without a cgroup.
func pidsRefused(cg *cgroup.Group, usage cgroup.Usage) int64 {
	if cg == nil {
		return -1
	}
	return usage.PidsRefused
}

// await reads the helper's answer; on ctx's end it asks the helper to stop
// the step and keeps waiting, up to the grace and a margin. When over is
// closed (the step wrote past Limits.OutputTotal), it asks the helper to
// kill the step's tree at once. When hard fires (the step's deadline,
// grace and a margin have passed without an answer) it gives up: the
// caller stops the helper, and its namespace ends everything of the step.
func (s *Slot) await(ctx context.Context, over <-chan struct{}, hard <-chan time.Time) (runResponse, error) {
	type answer struct {
		r   runResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		var r runResponse
		_, err := readMsg(s.conn, &r)
		ch <- answer{r, err}
	}()
	var giveUp <-chan time.Time
	cancelCh := ctx.Done()
	for {
		select {
		case a := <-ch:
			if a.err != nil {
				return runResponse{}, fmt.Errorf("%w: %v", ErrHelperDied, a.err)
			}
			return a.r, nil
		case <-cancelCh:
			cancelCh = nil
			if err := writeMsg(s.conn, request{Op: "cancel"}, nil); err != nil {
				return runResponse{}, fmt.Errorf("%w: %v", ErrHelperDied, err)
			}
			giveUp = time.After(s.cfg.Grace + 5*time.Second)
		case <-over:
			over = nil
			if err := writeMsg(s.conn, request{Op: "kill"}, nil); err != nil {
				return runResponse{}, fmt.Errorf("%w: %v", ErrHelperDied, err)
			}
			if giveUp == nil {
				giveUp = time.After(s.cfg.Grace + 5*time.Second)
			}
		case <-giveUp:
			return runResponse{}, fmt.Errorf("%w: no answer after the step was stopped", ErrHelperDied)
		case <-hard:
			return runResponse{}, fmt.Errorf("%w: no answer past the step's deadline and grace", ErrHelperDied)
		}
	}
}

// serveEgress receives the connections the helper accepted on its proxy
// port and serves each with handle, until the helper goes away.
func serveEgress(c *net.UnixConn, handle func(net.Conn)) {
	defer c.Close()
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 {
			continue
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			f := os.NewFile(uintptr(fd), "egress-conn")
			nc, err := net.FileConn(f)
			f.Close()
			if err == nil {
				handle(nc) // never blocks (Config.Egress)
			}
		}
	}
}

// DefaultPath is the PATH of a step that sets none.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

func (s *Slot) stderr() io.Writer {
	if s.cfg.Stderr == nil {
		return io.Discard
	}
	return s.cfg.Stderr
}

// buildEnv is a step's whole environment: the spec's variables plus PATH,
// LANG, USER, and HOME and TMPDIR pointing into the workspace at dir;
// nothing of the worker's own environment.
func buildEnv(st Step, dir string) []string {
	env := map[string]string{"PATH": DefaultPath, "LANG": "C.UTF-8", "USER": "airlock", "LOGNAME": "airlock"}
	for k, v := range st.Env {
		env[k] = v
	}
	env["HOME"] = dir
	env["TMPDIR"] = filepath.Join(dir, "tmp")
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}
