package contract

// What a validation child puts on itself: Landlock (landlockExec) and a
// seccomp allow-list.

import (
	"errors"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/internal/isolation/confine"
)

// landlockABI returns the kernel's Landlock ABI version, 0 without one.
func landlockABI() int {
	abi, _ := confine.LandlockABI()
	return abi
}

// llExecRead are the rights the child has on its binary and libraries.
const llExecRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE

// childLibraries are where the dynamic loader finds what this binary
// links (when it is not static); the child may read and execute beneath
// them, and nothing else but its binary.
var childLibraries = []string{"/usr/lib", "/usr/lib64", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache"}

// restrictSelf puts the calling thread in a Landlock domain that handles
// every right the kernel knows, and grants only reading and executing
// this binary and the libraries.
func restrictSelf() error {
	abi := landlockABI()
	if abi < 1 {
		return fmt.Errorf("the kernel has no Landlock")
	}
	var net, scoped uint64
	if abi >= 4 {
		net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if abi >= 6 {
		scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	rs, err := confine.NewRuleset(abi, confine.HandledFS(abi), net, scoped)
	if err != nil {
		return fmt.Errorf("create ruleset: %w", err)
	}
	defer rs.Close()
	for _, p := range append([]string{"/proc/self/exe"}, childLibraries...) {
		if err := rs.AllowPath(p, llExecRead); err != nil {
			if p != "/proc/self/exe" && errors.Is(err, unix.ENOENT) {
				continue // absent on this system
			}
			return fmt.Errorf("add rule %s: %w", p, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := rs.RestrictSelf(); err != nil {
		return fmt.Errorf("restrict self: %w", err)
	}
	return nil
}

// childCalls are the system calls a validation child makes once it has
// started: the Go runtime's (memory, threads, signals to itself, time,
// the poller) and reading and writing the descriptors it has. Every other
// call fails with EPERM: no open, exec, socket, fork, ptrace, mount.
var childCalls = []string{
	"read", "write", "readv", "writev", "pread64", "pwrite64", "close", "fcntl", "fstat", "newfstatat", "lseek",
	"mmap", "munmap", "madvise", "mprotect", "mremap", "brk",
	"futex", "sched_yield", "nanosleep", "clock_nanosleep", "clock_gettime", "gettimeofday", "sched_getaffinity",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "getpid", "gettid", "tgkill", "tkill",
	"getuid", "geteuid", "getgid", "getegid",
	"getrlimit", "prlimit64", "getrandom", "restart_syscall", "exit", "exit_group", "arch_prctl", "set_robust_list", "rseq",
	"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2", "epoll_wait", "eventfd2", "pipe2",
}

// installChildSeccomp loads the allow-list on every thread of the process
// (TSYNC), with no_new_privs. clone is allowed for threads only
// (CLONE_THREAD set); clone3, whose flags a filter cannot read, fails with
// ENOSYS (Go starts threads with clone). A call of another ABI (i386's int
// 0x80, x32) kills the process.
func installChildSeccomp() error {
	guard, info, err := confine.ArchGuard()
	if err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	allow := bpf.RetConstant{Val: uint32(seccomp.ActionAllow)}
	prog := append(guard, bpf.LoadAbsolute{Off: confine.NrOffset, Size: 4})
	if info.ID == arch.X86_64.ID {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(arch.X32.SeccompMask), SkipFalse: 1},
			bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)})
	}
	for _, n := range childCalls {
		if nr, ok := info.SyscallNames[n]; ok { // not every ABI has every call
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1}, allow)
		}
	}
	if nr, ok := info.SyscallNames["clone3"]; ok {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
			bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)})
	}
	if nr, ok := info.SyscallNames["clone"]; ok {
		// clone's flags are its first argument on x86-64 and arm64.
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 3},
			bpf.LoadAbsolute{Off: confine.ArgLow(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_THREAD, SkipFalse: 1}, allow)
	}
	prog = append(prog, bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := confine.LoadFilter(raw, true); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
