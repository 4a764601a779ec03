package contract

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Internals of the validation child for the tests of package
// contract_test.

func init() { childProbe = probe }

// Probe runs a child that tries what its confinement must deny and
// answers what each attempt gave (the error, or "ok").
func Probe(c *Child, deadline time.Time) (map[string]string, error) {
	resp, err := c.call(context.Background(), childRequest{Probe: true}, deadline)
	return resp.Probe, err
}

// probe runs in the child.
func probe() map[string]string {
	res := func(err error) string {
		if err == nil {
			return "ok"
		}
		return err.Error()
	}
	out := map[string]string{"uid": strconv.Itoa(os.Getuid()), "pid": strconv.Itoa(os.Getpid()), "args": strings.Join(os.Args[1:], " ")}
	_, err := os.ReadFile("/etc/hostname")
	out["open"] = res(err)
	_, err = os.ReadFile("/proc/self/status")
	out["open_proc"] = res(err)
	_, err = net.DialTimeout("tcp", "127.0.0.1:6379", time.Second)
	out["tcp"] = res(err)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	out["unix_socket"] = res(err)
	_, err = syscall.ForkExec("/bin/true", []string{"true"}, nil)
	out["fork"] = res(err)
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	switch {
	case errno != 0:
		out["raw_fork"] = errno.Error()
	case pid == 0:
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the new process, if it ever was
	default:
		out["raw_fork"] = "ok"
	}
	err = unix.Kill(1, 0)
	out["kill_1"] = res(err)
	_, _, errno = unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1, 0)
	out["ptrace"] = res(errors.New(errno.Error()))
	return out
}

// LandlockABI is the kernel's Landlock ABI, as the child sees it.
func LandlockABI() int { return landlockABI() }
