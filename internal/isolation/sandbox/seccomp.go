//go:build linux

package sandbox

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/internal/isolation/confine"
)

// The syscall filter of every step, modelled on Docker's default seccomp
// profile but written as a deny list: what Docker allows only to a
// container with CAP_SYS_ADMIN (or other capabilities a step never has),
// plus what opens kernel attack surface a step does not need. A denied
// call fails with EPERM, so that programs fall back; clone3, whose flags a
// filter cannot read, fails with ENOSYS, so that the C library falls back
// to clone, whose flags it can. A system call of another ABI than the
// worker's (i386's int 0x80 on x86-64) kills the process: the filter is
// written for one ABI, and a default-allow filter must not be bypassed
// through another.

// SeccompProfile names the filter in the isolation tiers.
const SeccompProfile = "airlock-default"

// nsFlags are the namespace flags of clone(2) and unshare(2).
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// deniedCalls fail with EPERM for every step.
var deniedCalls = []string{
	// namespaces and mounts
	"setns", "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr",
	"fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	// keys: kernel keyrings are per uid and would outlive the task
	"keyctl", "add_key", "request_key",
	// kernel attack surface
	"bpf", "userfaultfd", "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"fanotify_init", "name_to_handle_at", "open_by_handle_at", "kcmp", "lookup_dcookie",
	// the machine's own business
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
	"query_module", "get_kernel_syms", "acct", "swapon", "swapoff", "reboot", "syslog", "quotactl",
	"quotactl_fd", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "vm86", "vm86old", "iopl", "ioperm",
	"settimeofday", "clock_settime", "clock_adjtime", "stime", "sethostname", "setdomainname", "vhangup",
}

// hostIPCCalls are denied too when the steps share the host's IPC
// namespace: SysV objects and POSIX queues there belong to the host.
var hostIPCCalls = []string{
	"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
	"msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
	"mq_notify", "mq_getsetattr",
}

// deniedArgs deny a call when one argument's low 32 bits hold a value.
// The kernel reads these arguments as int: a rule on all 64 bits (the
// library's) would let a step pass by setting the upper ones.
var deniedArgs = []struct {
	call  string
	arg   int
	value uint32
}{
	// Multipath TCP: Landlock's TCP rules (bind and connect ports) do
	// not cover it.
	{"socket", 2, unix.IPPROTO_MPTCP},
	{"socketpair", 2, unix.IPPROTO_MPTCP},
}

// allowedPersonalities are Docker's: the default, UNAME26, PER_LINUX32
// with and without it, and the query.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// allowedFamilies are the socket families a step may open; AF_NETLINK is
// limited to NETLINK_ROUTE (getifaddrs: glibc's getaddrinfo, Node's
// os.networkInterfaces, Python's socket.if_nameindex), which shows only the
// step's own network namespace and changes nothing without CAP_NET_ADMIN.
var allowedFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// seccompPolicy is the filter for this machine's ABI; it returns the policy
// and how many syscalls and argument rules it has.
func seccompPolicy(hostIPC bool) (*seccomp.Policy, int, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, 0, err
	}
	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	known := func(list []string) []string {
		var out []string
		for _, n := range list {
			if _, ok := info.SyscallNames[n]; ok { // not every ABI has every call
				out = append(out, n)
			}
		}
		return out
	}
	names := known(deniedCalls)
	if hostIPC {
		names = append(names, known(hostIPCCalls)...)
	}
	var conds []seccomp.NameWithConditions
	notIn := func(arg uint32, values []uint64) seccomp.ArgumentConditions {
		var c seccomp.ArgumentConditions
		for _, v := range values {
			c = append(c, seccomp.Condition{Argument: arg, Operation: seccomp.NotEqual, Value: v})
		}
		return c
	}
	for _, call := range []string{"socket", "socketpair"} {
		conds = append(conds,
			seccomp.NameWithConditions{Name: call, Conditions: notIn(0, allowedFamilies)},
			seccomp.NameWithConditions{Name: call, Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_NETLINK},
				{Argument: 2, Operation: seccomp.NotEqual, Value: unix.NETLINK_ROUTE},
			}})
	}
	conds = append(conds,
		seccomp.NameWithConditions{Name: "unshare", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: nsFlags | unix.CLONE_NEWTIME}}},
		// clone's flags are its first argument on x86-64 and arm64; the
		// low byte is the exit signal, where CLONE_NEWTIME's bit lies.
		seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: nsFlags}}},
		seccomp.NameWithConditions{Name: "personality", Conditions: notIn(0, allowedPersonalities)},
	)
	groups := []seccomp.SyscallGroup{
		{Names: names, Action: eperm},
		{NamesWithCondtions: conds, Action: eperm},
	}
	n := len(names) + len(conds)
	if _, ok := info.SyscallNames["clone3"]; ok {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)})
		n++
	}
	return &seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}, n, nil
}

// seccompProgram assembles the policy behind a guard that kills a process
// making a system call of another ABI, and deniedArgs' rules.
func seccompProgram(hostIPC bool) ([]bpf.RawInstruction, int, error) {
	pol, n, err := seccompPolicy(hostIPC)
	if err != nil {
		return nil, 0, err
	}
	body, err := pol.Assemble()
	if err != nil {
		return nil, 0, err
	}
	prog, info, err := confine.ArchGuard()
	if err != nil {
		return nil, 0, err
	}
	// The body starts by loading what it reads: these come first.
	for _, d := range deniedArgs {
		nr, ok := info.SyscallNames[d.call]
		if !ok {
			continue
		}
		prog = append(prog,
			bpf.LoadAbsolute{Off: confine.NrOffset, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 3},
			bpf.LoadAbsolute{Off: confine.ArgLow(d.arg), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: d.value, SkipFalse: 1},
			bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)},
		)
		n++
	}
	raw, err := bpf.Assemble(append(prog, body...))
	return raw, n, err
}

// installSeccomp loads the filter on the calling thread (no_new_privs must
// be set); every process it forks inherits it. It returns the Seccomp
// status.
func installSeccomp(hostIPC bool) string {
	raw, n, err := seccompProgram(hostIPC)
	if err != nil {
		return "off: build filter: " + err.Error()
	}
	// No TSYNC: the filter is this thread's, and its children's.
	if err := confine.LoadFilter(raw, false); err != nil {
		return "off: seccomp: " + err.Error()
	}
	name := SeccompProfile
	if hostIPC {
		name += "+host-ipc"
	}
	return fmt.Sprintf("%s: %d rules (denied calls fail with EPERM; other ABIs killed)", name, n)
}
