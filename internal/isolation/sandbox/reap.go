//go:build linux

package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// reap waits for process pid, a child of the helper, to exit and reaps it.
//
// The wait is parked in the Go runtime's poller on a pidfd, not blocked
// in wait4(2): a goroutine blocked in a system call keeps a P in the
// syscall state, and the runtime's sysmon thread then wakes every 20 µs
// to retake it for as long as the step runs — on this project's 2-core
// VMs that polling cost the helper more CPU than the rest of its work per
// step. Where pidfds are not available (before Linux 5.10), it blocks in
// wait4.
func reap(pid int, ws *unix.WaitStatus, ru *unix.Rusage) error {
	if fd, err := unix.PidfdOpen(pid, unix.O_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(fd), "pidfd")
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			var werr error
			done := false
			err := rc.Read(func(uintptr) bool {
				// Called first at once, then each time the pidfd is
				// readable: the process has exited.
				var got int
				got, werr = unix.Wait4(pid, ws, unix.WNOHANG, ru)
				if werr == unix.EINTR {
					return false
				}
				done = werr != nil || got == pid
				return done
			})
			if done {
				return werr
			}
			if err != nil && werr == nil {
				// The poller refused the descriptor (not pollable):
				// block instead.
				return wait4(pid, ws, ru)
			}
		}
	}
	return wait4(pid, ws, ru)
}

// wait4 blocks until pid exits and reaps it.
func wait4(pid int, ws *unix.WaitStatus, ru *unix.Rusage) error {
	for {
		_, err := unix.Wait4(pid, ws, 0, ru)
		if err != unix.EINTR {
			return err
		}
	}
}
