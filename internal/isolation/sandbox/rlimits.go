//go:build linux

package sandbox

import (
	"time"

	"github.com/airlock-run/airlock/limits"
	"golang.org/x/sys/unix"
)

// Rlimit is one resource limit to set on a process.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// rlimitsOf maps a resolved limits.Set onto the rlimits applied to a step before its
// first instruction. extraProcs is added to RLIMIT_NPROC for the tasks that
// already run as the step's uid (the slot's helper and its threads), since
// the kernel counts every task of the uid.
//
// With cgroup set, memory and processes are the step's control group's and neither RLIMIT_AS nor RLIMIT_NPROC is set: the
// first would refuse runtimes that reserve more address space than they
// use (Node.js, the JVM) while it misses tmpfs and memfd pages; the second
// counts the whole uid.
//
// RLIMIT_CPU gets a hard limit one second above the soft one: the soft limit
// sends SIGXCPU, the hard one SIGKILL for a process that ignores it.
func rlimitsOf(s limits.Set, extraProcs int, cgroup bool) []Rlimit {
	cpu := uint64(1) // RLIMIT_CPU 0 would kill at once; ask for at least 1s
	if d := time.Duration(s.CPUTime); d > time.Second {
		cpu = uint64((d-1)/time.Second) + 1 // ceil(d / 1s), exact in integers
	}
	out := []Rlimit{{unix.RLIMIT_CPU, cpu, cpu + 1}}
	if !cgroup {
		out = append(out,
			Rlimit{unix.RLIMIT_AS, uint64(s.Memory), uint64(s.Memory)},
			Rlimit{unix.RLIMIT_NPROC, uint64(s.Processes + extraProcs), uint64(s.Processes + extraProcs)})
	}
	return append(out,
		Rlimit{unix.RLIMIT_FSIZE, uint64(s.FileSize), uint64(s.FileSize)},
		Rlimit{unix.RLIMIT_NOFILE, uint64(s.OpenFiles), uint64(s.OpenFiles)},
		Rlimit{unix.RLIMIT_CORE, 0, 0})
}
