//go:build linux

package sandbox

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Descriptors: a step gets its stdin, stdout and stderr and nothing else.
// Go opens every descriptor of its own close-on-exec, so the ones that
// could leak are those a process inherited from whatever started it: the
// worker marks them close-on-exec at start (MaybeHelper), and a helper
// closes those it still finds, so that a step can neither read nor write
// through a descriptor the worker was given by accident.

// markInheritedCloexec marks every descriptor above stderr close-on-exec.
func markInheritedCloexec() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	for _, fd := range openFDs(3) {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	}
}

// closeInherited closes every descriptor from on that is not
// close-on-exec: those the process inherited, not the Go runtime's own.
func closeInherited(from int) {
	for _, fd := range openFDs(from) {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// openFDs lists the open descriptors from on, from /proc/self/fd.
func openFDs(from int) []int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	self := int(d.Fd())
	var out []int
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err == nil && fd >= from && fd != self {
			out = append(out, fd)
		}
	}
	d.Close()
	return out
}
