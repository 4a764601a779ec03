package confine

import (
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data.
const (
	NrOffset   = 0  // seccomp_data.nr
	ArchOffset = 4  // seccomp_data.arch
	ArgsOffset = 16 // seccomp_data.args, 8 bytes each
)

// ArgLow is the offset of the low 32 bits of system call argument i, the
// part the kernel reads of an int argument.
func ArgLow(i int) uint32 {
	low := uint32(0)
	if cpu.IsBigEndian {
		low = 4
	}
	return ArgsOffset + 8*uint32(i) + low
}

// ArchGuard is the prologue of every filter: a system call of another ABI
// than this machine's (i386's int 0x80 on x86-64) kills the process, as a
// filter is written for one ABI's numbers. It returns the ABI too.
func ArchGuard() ([]bpf.Instruction, *arch.Info, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, nil, err
	}
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: ArchOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}, info, nil
}

// LoadFilter loads an assembled filter on the calling thread, or with
// tsync on every thread of the process; no_new_privs must be set. Every
// process forked after inherits it. The error is the kernel's.
func LoadFilter(raw []bpf.RawInstruction, tsync bool) error {
	if len(raw) == 0 {
		return unix.EINVAL
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	flags := uintptr(0)
	if tsync {
		flags = unix.SECCOMP_FILTER_FLAG_TSYNC
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return errno
	}
	return nil
}
