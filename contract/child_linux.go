package contract

// The validation child on Linux: this binary re-executed, confined as a
// step is, and killed at the task's deadline.
//
// The worker starts it as the slot's uid (when root) in new PID, network,
// IPC, UTS and mount namespaces, and puts it in the slot's control group
// (Child.Join) before it reads anything. The child first restricts itself
// with Landlock and executes itself again, so that the domain holds for
// every thread of the process that reads the untrusted document (Landlock
// restricts the calling thread only, and a Go program has several; the
// kernels without LANDLOCK_RESTRICT_SELF_TSYNC cannot do better); then
// it bounds itself with rlimits and a seccomp allow-list (on all threads)
// before it reads its request.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Flags of a validation child (its argv[4], comma-separated).
const (
	flagLandlock   = "landlock"   // restrict itself with Landlock, then execute itself again
	flagLandlocked = "landlocked" // done: the process is in its Landlock domain
)

// childNamespaces are the namespaces a root worker starts a child in.
const childNamespaces = syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC |
	syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS

// killWait is how long a killed child is waited for, at most.
const killWait = time.Second

func (c *Child) run(ctx context.Context, s *Schema, doc []byte, deadline time.Time) ([]Violation, error) {
	resp, err := c.call(ctx, childRequest{Schema: s.src, Doc: doc, MaxUnits: MaxUnits}, deadline)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.TooCostly != "":
		return nil, fmt.Errorf("%w: %s", ErrTooCostly, resp.TooCostly)
	case resp.Error != "":
		return nil, errors.New("validation child: " + resp.Error)
	}
	return resp.Violations, nil
}

// call starts a child, sends it r and reads its answer, within deadline
// and ctx.
func (c *Child) call(ctx context.Context, r childRequest, deadline time.Time) (childResponse, error) {
	var resp childResponse
	req, err := json.Marshal(r)
	if err != nil {
		return resp, err
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(time.Minute)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	path := c.Path
	if path == "" {
		path = "/proc/self/exe"
	}
	cpu := int64(math.Ceil(time.Until(deadline).Seconds())) + 1
	conf := c.confinement()
	cmd := exec.Command(path, childArg, strconv.FormatInt(ChildMemory, 10), strconv.FormatInt(cpu, 10), conf.flags())
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.Dir = "/"
	var pipes [4]*os.File // stdin's read and write ends, stdout's
	for i := 0; i < 4; i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			closeAll(pipes[:])
			return resp, err
		}
	}
	inW, outR := pipes[1], pipes[2]
	cmd.Stdin, cmd.Stdout = pipes[0], pipes[3]
	var errOut limitedBuffer
	errOut.max = 4 << 10
	cmd.Stderr = &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: !conf.namespaces}
	if conf.namespaces {
		cmd.SysProcAttr.Cloneflags = childNamespaces
	}
	if conf.uid {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(c.UID), Gid: uint32(c.GID), Groups: []uint32{}}
	}
	err = cmd.Start()
	pipes[0].Close()
	pipes[3].Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return resp, fmt.Errorf("validation child: %w", err)
	}
	kill := func() {
		if conf.namespaces {
			_ = cmd.Process.Kill() // the init of its PID namespace: all of it ends
		} else {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The child says it is ready (bounded, filtered, in its last
	// process) with one byte, then reads its request, then answers.
	ready, answered := make(chan bool, 1), make(chan []byte, 1)
	go func() {
		defer outR.Close()
		var b [1]byte
		_, err := io.ReadFull(outR, b[:])
		ready <- err == nil && b[0] == childReady
		var out limitedBuffer
		out.max = maxChildOutput
		_, _ = io.Copy(&out, outR)
		answered <- out.Bytes()
	}()
	stop := func() error {
		kill()
		inW.Close()
		// Never waited on much past the deadline: a child the kernel
		// does not reap at once is left to its goroutine.
		select {
		case <-done:
		case <-time.After(killWait):
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			return ErrCanceled
		}
		return ErrDeadline
	}
	select {
	case ok := <-ready:
		if !ok {
			inW.Close()
			select {
			case err = <-done:
			case <-ctx.Done():
				return resp, stop()
			}
			return resp, fmt.Errorf("validation child did not start: %v (%s)", err, bytes.TrimSpace(firstLine(errOut.Bytes())))
		}
		if c.Join != nil {
			if err := c.Join(cmd.Process.Pid); err != nil {
				kill()
				inW.Close()
				<-done
				return resp, fmt.Errorf("validation child: control group: %w", err)
			}
		}
	case <-ctx.Done():
		return resp, stop()
	}
	go func() {
		_, _ = inW.Write(req) // fails once the child is gone
		inW.Close()
	}()
	var out []byte
	select {
	case err = <-done:
		out = <-answered // the child is gone: its stdout ends
	case <-ctx.Done():
		return resp, stop()
	}
	if err != nil {
		// Killed at its CPU or memory bound: the Go runtime's "out of
		// memory", SIGXCPU, SIGKILL.
		return resp, fmt.Errorf("%w: validation child: %v (%s)", ErrTooCostly, err, bytes.TrimSpace(firstLine(errOut.Bytes())))
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return resp, fmt.Errorf("validation child: bad answer: %w", err)
	}
	return resp, nil
}

// childReady is the byte a child writes when it is ready for its request.
const childReady = '.'

func closeAll(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// confinement is what a child gets from this process.
type confinement struct {
	uid        bool // runs as Child.UID (the caller is root)
	namespaces bool // PID, network, IPC, UTS and mount namespaces (the caller is root)
	landlock   int  // the kernel's Landlock ABI; 0: none
}

func (c *Child) confinement() confinement {
	root := os.Geteuid() == 0
	return confinement{uid: root && c.UID >= 0, namespaces: root, landlock: landlockABI()}
}

func (cf confinement) flags() string {
	if cf.landlock > 0 {
		return flagLandlock
	}
	return "-"
}

// Describe says how c confines validations, for a run record's isolation.
func (c *Child) Describe() string {
	cf := c.confinement()
	var parts []string
	if cf.uid {
		parts = append(parts, "the slot's uid")
	} else {
		parts = append(parts, "off: the worker's uid (the worker is not root)")
	}
	if cf.namespaces {
		parts = append(parts, "pid, network, ipc, uts and mount namespaces")
	} else {
		parts = append(parts, "no namespaces (the worker is not root)")
	}
	if cf.landlock > 0 {
		parts = append(parts, fmt.Sprintf("landlock abi %d (no file but its binary and the system libraries it loads, no tcp)", cf.landlock))
	} else {
		parts = append(parts, "no landlock (the kernel has none)")
	}
	parts = append(parts, "seccomp allow-list (threads, memory, read and write of its pipes: no open, exec, fork or socket)", "no_new_privs")
	if c.Join != nil {
		parts = append(parts, "the slot's control group (the memory and pids limits of the task's last step)")
	} else {
		parts = append(parts, "no control group")
	}
	parts = append(parts, fmt.Sprintf("RLIMIT_AS %d MiB above its start, RLIMIT_CPU to the task's deadline, GOMAXPROCS=1", ChildMemory>>20))
	return fmt.Sprintf("in the worker up to %d units of work (the cost model), else in a child process killed at the task's deadline: %s",
		InProcessUnits, strings.Join(parts, ", "))
}

// MaybeValidator runs a validation child and exits when the process was
// started as one; otherwise it returns at once. A binary that embeds a
// worker must call it at the top of main.
func MaybeValidator() {
	if len(os.Args) != 5 || os.Args[1] != childArg {
		return
	}
	if err := validatorMain(os.Args[2:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "airlock validation child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// maxChildInput bounds a child's request: the largest schema the cache
// holds and the largest result a worker reads, with room to spare.
const maxChildInput = 64 << 20

func validatorMain(args []string, in io.Reader, out io.Writer) error {
	mem, err1 := strconv.ParseUint(args[0], 10, 64)
	cpu, err2 := strconv.ParseUint(args[1], 10, 64)
	if err1 != nil || err2 != nil {
		return errors.New("bad arguments")
	}
	flags := strings.Split(args[2], ",")
	// Bound ourselves before reading anything untrusted. The Go runtime
	// has reserved address space it has not used yet: the bound is on top
	// of what is mapped now (once in the Landlock domain, /proc cannot be
	// read: what the first process mapped stands for it).
	as := mem + vmSize()
	switch {
	case hasFlag(flags, flagLandlocked):
		as = mem // the first process's bound
	case hasFlag(flags, flagLandlock):
		return landlockExec(as, cpu, args[2])
	}
	for _, l := range []struct {
		res      int
		cur, max uint64
	}{
		{unix.RLIMIT_AS, as, as}, {unix.RLIMIT_CPU, cpu, cpu + 1},
		{unix.RLIMIT_CORE, 0, 0}, {unix.RLIMIT_FSIZE, 0, 0}, {unix.RLIMIT_NOFILE, 16, 16},
	} {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.cur, Max: l.max}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.res, err)
		}
	}
	if err := installChildSeccomp(); err != nil {
		return err
	}
	if _, err := out.Write([]byte{childReady}); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(in, maxChildInput+1))
	if err != nil {
		return err
	}
	if len(data) > maxChildInput {
		return errors.New("request too large")
	}
	var req childRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return err
	}
	resp := validateChild(req)
	return json.NewEncoder(out).Encode(resp)
}

func hasFlag(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// landlockExec restricts the calling thread with Landlock (no file access
// but reading and executing this binary and the system libraries, no TCP,
// no abstract unix socket or signal out of the domain) and executes this
// binary again from it: the new process, and every thread it starts, is
// in the domain. The new process gets as, its address-space bound, in
// place of the memory bound.
func landlockExec(as, cpu uint64, flags string) error {
	runtime.LockOSThread() // for good: the thread ends with exec
	if err := restrictSelf(); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	argv := []string{os.Args[0], childArg, strconv.FormatUint(as, 10), strconv.FormatUint(cpu, 10), flags + "," + flagLandlocked}
	return unix.Exec("/proc/self/exe", argv, os.Environ())
}

// vmSize reads this process's mapped address space, in bytes.
func vmSize() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmSize:")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err == nil {
				return n << 10
			}
		}
	}
	return 0
}
