package contract

// What a validation child puts on itself: Landlock (landlockExec) and a
// seccomp allow-list.

import (
	"fmt"
	"sync"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

var landlockOnce = sync.OnceValue(func() int {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(abi)
})

// landlockABI returns the kernel's Landlock ABI version, 0 without one.
func landlockABI() int { return landlockOnce() }

// Landlock rights.
const (
	llExecRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE
	llAllFS1   = 0x1FFF // ABI 1: EXECUTE .. MAKE_SYM
)

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
	fs := uint64(llAllFS1)
	if abi >= 2 {
		fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs}
	size := unsafe.Offsetof(attr.Handled_access_net)
	if abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		size = unsafe.Offsetof(attr.Scoped)
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
		size = unsafe.Offsetof(attr.Quiet_access_fs)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("create ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	for _, p := range append([]string{"/proc/self/exe"}, childLibraries...) {
		pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if p == "/proc/self/exe" {
				return fmt.Errorf("open %s: %w", p, err)
			}
			continue // absent on this system
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: llExecRead, Parent_fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		unix.Close(pfd)
		if errno != 0 {
			return fmt.Errorf("add rule %s: %w", p, errno)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("restrict self: %w", errno)
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
	info, err := arch.GetInfo("")
	if err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	const (
		nrOffset   = 0  // seccomp_data.nr
		archOffset = 4  // seccomp_data.arch
		argsOffset = 16 // seccomp_data.args, 8 bytes each
	)
	lowWord := uint32(0)
	if cpu.IsBigEndian {
		lowWord = 4
	}
	allow := bpf.RetConstant{Val: uint32(seccomp.ActionAllow)}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
		bpf.LoadAbsolute{Off: nrOffset, Size: 4},
	}
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
			bpf.LoadAbsolute{Off: argsOffset + lowWord, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_THREAD, SkipFalse: 1}, allow)
	}
	prog = append(prog, bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
