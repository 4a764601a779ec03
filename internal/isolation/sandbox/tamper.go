//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A step runs as the helper's own uid, so the kernel lets it change what
// the helper holds per process or per thread without ptrace access:
// rlimits (prlimit), nice, scheduling policy and attributes
// (sched_setattr), CPU affinity and I/O priority. Later steps, other
// tasks' steps, would inherit the change. The helper records all of it at
// start (baseline) and compares after every step; a difference makes the
// slot replace its helper before the next step (runResponse.Leftover).

// rlimitResources are every rlimit of Linux.
var rlimitResources = []int{
	unix.RLIMIT_CPU, unix.RLIMIT_FSIZE, unix.RLIMIT_DATA, unix.RLIMIT_STACK, unix.RLIMIT_CORE,
	unix.RLIMIT_RSS, unix.RLIMIT_NPROC, unix.RLIMIT_NOFILE, unix.RLIMIT_MEMLOCK, unix.RLIMIT_AS,
	unix.RLIMIT_LOCKS, unix.RLIMIT_SIGPENDING, unix.RLIMIT_MSGQUEUE, unix.RLIMIT_NICE,
	unix.RLIMIT_RTPRIO, unix.RLIMIT_RTTIME,
}

// schedAttr is struct sched_attr (sched_getattr(2)), its first fields.
type schedAttr struct {
	Size     uint32
	Policy   uint32
	Flags    uint64
	Nice     int32
	Priority uint32
	Runtime  uint64
	Deadline uint64
	Period   uint64
	UtilMin  uint32
	UtilMax  uint32
}

// threadAttrs are what a process of the same uid can change of a thread.
type threadAttrs struct {
	sched    schedAttr
	affinity unix.CPUSet
	ioprio   int
}

// baseline is the helper's state when it started serving.
type baseline struct {
	rlimits [16]unix.Rlimit
	thread  threadAttrs

	// limitsFD is /proc/self/limits, kept open, and limitsText what it
	// read at start: one pread tells that no rlimit changed, where
	// reading each takes 16 system calls (-1: not available).
	limitsFD   int
	limitsText []byte
	buf        []byte

	// threads is how many threads the helper had at the last check: the
	// room a step's RLIMIT_NPROC must leave for them (they run as the
	// step's uid), counted there rather than once more per spawn.
	threads atomic.Int32
}

func readThread(tid int) (threadAttrs, error) {
	var a threadAttrs
	a.sched.Size = uint32(unsafe.Sizeof(a.sched))
	if _, _, e := unix.Syscall6(unix.SYS_SCHED_GETATTR, uintptr(tid), uintptr(unsafe.Pointer(&a.sched)), unsafe.Sizeof(a.sched), 0, 0, 0); e != 0 {
		return a, fmt.Errorf("sched_getattr %d: %w", tid, e)
	}
	if err := unix.SchedGetaffinity(tid, &a.affinity); err != nil {
		return a, fmt.Errorf("sched_getaffinity %d: %w", tid, err)
	}
	const ioprioWhoProcess = 1
	p, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if e != 0 {
		return a, fmt.Errorf("ioprio_get %d: %w", tid, e)
	}
	a.ioprio = int(p)
	return a, nil
}

// takeBaseline records the helper's rlimits and the calling thread's
// attributes, which every thread of the helper shares at start.
func takeBaseline() (*baseline, error) {
	var b baseline
	for i, r := range rlimitResources {
		if err := unix.Prlimit(0, r, nil, &b.rlimits[i]); err != nil {
			return nil, fmt.Errorf("getrlimit %d: %w", r, err)
		}
	}
	t, err := readThread(unix.Gettid())
	if err != nil {
		return nil, err
	}
	b.thread = t
	b.threads.Store(int32(countThreads()))
	b.limitsFD = -1
	if fd, err := unix.Open("/proc/self/limits", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		b.buf = make([]byte, 8<<10)
		if text, ok := b.readLimits(fd); ok {
			b.limitsFD, b.limitsText = fd, text
		} else {
			unix.Close(fd)
		}
	}
	return &b, nil
}

// readLimits reads the whole of /proc/self/limits through fd; ok is false
// when it cannot be read in one pread.
func (b *baseline) readLimits(fd int) ([]byte, bool) {
	for {
		n, err := unix.Pread(fd, b.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 || n == len(b.buf) {
			return nil, false
		}
		return bytes.Clone(b.buf[:n]), true
	}
}

// rlimitsUnchanged reports, in one system call, that the helper's rlimits
// are those of the baseline; false means that they may not be.
func (b *baseline) rlimitsUnchanged() bool {
	if b.limitsFD < 0 {
		return false
	}
	n, err := unix.Pread(b.limitsFD, b.buf, 0)
	return err == nil && n > 0 && n < len(b.buf) && bytes.Equal(b.buf[:n], b.limitsText)
}

// check compares the helper's state with the baseline and says what a
// step changed, "" when nothing.
func (b *baseline) check() string {
	if !b.rlimitsUnchanged() {
		for i, r := range rlimitResources {
			var cur unix.Rlimit
			if err := unix.Prlimit(0, r, nil, &cur); err != nil {
				return fmt.Sprintf("getrlimit %d: %v", r, err)
			}
			if cur != b.rlimits[i] {
				return fmt.Sprintf("a step changed the helper's rlimit %d from %v to %v", r, b.rlimits[i], cur)
			}
		}
	}
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return "list threads: " + err.Error()
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return "list threads: " + err.Error()
	}
	threads := 0
	defer func() { b.threads.Store(int32(threads)) }()
	for _, n := range names {
		tid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		threads++
		a, err := readThread(tid)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue // the thread ended meanwhile
			}
			return err.Error()
		}
		if a != b.thread {
			return fmt.Sprintf("a step changed the scheduling of helper thread %d (%+v, was %+v)", tid, a, b.thread)
		}
	}
	return ""
}
