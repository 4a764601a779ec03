package contract

// The validation child on Linux: this binary re-executed, bounded by
// rlimits it sets on itself before reading anything, no_new_privs, the
// slot's uid and the task's deadline.

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
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func (c *Child) run(ctx context.Context, s *Schema, doc []byte, deadline time.Time) ([]Violation, error) {
	req, err := json.Marshal(childRequest{Schema: s.src, Doc: doc, MaxUnits: MaxUnits})
	if err != nil {
		return nil, err
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
	left := time.Until(deadline)
	cpu := int64(math.Ceil(left.Seconds())) + 1
	cmd := exec.CommandContext(ctx, path, childArg, strconv.FormatInt(ChildMemory, 10), strconv.FormatInt(cpu, 10))
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(req)
	var out, errOut limitedBuffer
	out.max, errOut.max = maxChildOutput, 4<<10
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if c.UID >= 0 && os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(c.UID), Gid: uint32(c.GID)}
	}
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, ErrDeadline
	}
	if err != nil {
		// Killed at its CPU or memory bound: the Go runtime's "out of
		// memory", SIGXCPU, SIGKILL.
		return nil, fmt.Errorf("%w: validation child: %v (%s)", ErrTooCostly, err, bytes.TrimSpace(firstLine(errOut.Bytes())))
	}
	var resp childResponse
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("validation child: bad answer: %w", err)
	}
	switch {
	case resp.TooCostly != "":
		return nil, fmt.Errorf("%w: %s", ErrTooCostly, resp.TooCostly)
	case resp.Error != "":
		return nil, errors.New("validation child: " + resp.Error)
	}
	return resp.Violations, nil
}

// MaybeValidator runs a validation child and exits when the process was
// started as one; otherwise it returns at once. A binary that embeds a
// worker must call it at the top of main.
func MaybeValidator() {
	if len(os.Args) != 4 || os.Args[1] != childArg {
		return
	}
	if err := validatorMain(os.Args[2], os.Args[3], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "airlock validation child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// maxChildInput bounds a child's request: the largest schema the cache
// holds and the largest result a worker reads, with room to spare.
const maxChildInput = 64 << 20

func validatorMain(memArg, cpuArg string, in io.Reader, out io.Writer) error {
	mem, err1 := strconv.ParseUint(memArg, 10, 64)
	cpu, err2 := strconv.ParseUint(cpuArg, 10, 64)
	if err1 != nil || err2 != nil {
		return errors.New("bad arguments")
	}
	// Bound ourselves before reading anything untrusted. The Go runtime
	// has reserved address space it has not used yet: the bound is on top
	// of what is mapped now.
	as := mem + vmSize()
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: as, Max: as}); err != nil {
		return fmt.Errorf("RLIMIT_AS: %w", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: cpu, Max: cpu + 1}); err != nil {
		return fmt.Errorf("RLIMIT_CPU: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
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
