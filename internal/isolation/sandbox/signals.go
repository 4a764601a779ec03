//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A step runs as its helper's uid, so the kernel lets it signal the
// helper: kill, tgkill and tkill (si_code SI_USER, SI_TKILL),
// rt_sigqueueinfo, rt_tgsigqueueinfo and pidfd_send_signal with any
// negative si_code but SI_TKILL (SI_QUEUE, SI_MESGQ, SI_SIGIO...), and a
// descriptor's F_SETOWN/F_SETSIG owner (SI_SIGIO). As PID 1 of its PID
// namespace, the helper gets from inside only the signals it has a
// handler for; the Go runtime installs one for nearly all of them, and
// what it does with one depends on the signal and on si_code:
//
//   - A signal its table marks "notify" (SIGHUP, SIGINT, SIGTERM, SIGQUIT,
//     SIGABRT, SIGUSR1, SIGPIPE...) goes to os/signal's channel, whatever
//     its si_code, when the program asked for it: relayedSignals are
//     asked for, and dropped.
//   - The other signals with a handler either do nothing (SIGCHLD, SIGURG,
//     SIGPROF while not profiling, SIGWINCH, the real-time ones) or are
//     faultSignals: with si_code SI_USER or SI_TKILL the runtime treats
//     them as sent, and without a channel it throws; with any other
//     si_code it takes them for a fault of the thread they hit and
//     throws or panics there ("slot helper died"). os/signal cannot
//     change that, so faultSignals are set to SIG_IGN, with
//     rt_sigaction(2) behind the runtime's back: the kernel drops such a
//     signal at send time, from anyone, and a real fault (force_sig_fault)
//     still kills the helper, with that signal (the kernel resets an
//     ignored fault signal to its default to deliver it): a bug in the
//     helper stays loud, only its Go traceback is lost.
//
// The runtime still believes it handles faultSignals, so a forked child
// resets them to SIG_DFL before exec, as every other signal it handles:
// steps start with no signal ignored (TestForgedSignalsLeaveHelper reads
// their SigIgn).

// relayedSignals are caught and dropped: the runtime's table marks them
// "notify", which os/signal honours for any si_code. SIGTSTP, SIGTTIN and
// SIGTTOU are not handled unless asked for (SIG_DFL: the kernel drops them
// for a namespace's init); asked for, they stay caught, not ignored, in
// the helper, and so default in its steps.
var relayedSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGABRT,
	syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
	syscall.SIGVTALRM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGXCPU,
	syscall.SIGXFSZ, syscall.SIGIO, syscall.SIGPWR}

// faultSignals are those the runtime throws or panics on when they come
// with a forged si_code, channel or not: ignored in the helper.
var faultSignals = []unix.Signal{unix.SIGILL, unix.SIGTRAP, unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV,
	unix.SIGSTKFLT, unix.SIGSYS}

// guardSignals makes every signal a step can send its helper harmless:
// relayedSignals caught and dropped, faultSignals ignored. It must run
// before the first step.
func guardSignals() error {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, relayedSignals...)
	go func() {
		for range sigs {
		}
	}()
	return ignoreFaultSignals()
}

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it, the
// handler first (every Linux ABI Go supports but mips). Only the handler
// is set; the rest is zero whatever its layout.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// ignoreFaultSignals sets faultSignals to SIG_IGN in the kernel, leaving
// the runtime's own state alone.
func ignoreFaultSignals() error {
	if len(runtime.GOARCH) >= 4 && runtime.GOARCH[:4] == "mips" {
		return fmt.Errorf("ignore fault signals: struct sigaction of %s is not supported", runtime.GOARCH)
	}
	act := kernelSigaction{handler: 1} // SIG_IGN
	for _, sig := range faultSignals {
		const sigsetSize = 8 // the kernel's sigset_t: 64 signals
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, sigsetSize, 0, 0); errno != 0 {
			return fmt.Errorf("ignore %v: %w", sig, errno)
		}
	}
	return nil
}

// savedGID is the helper's saved gid when it runs as a slot's uid:
// nogroup, or one below it for a slot whose gid is nogroup. A step may
// change another process's rlimits only when their uids and gids all
// match, saved ones included, so the helper's are out of its reach
// (RLIMIT_CPU at 0 would have the kernel send the helper a SIGKILL that
// nothing stops). It grants the helper nothing: no access is checked
// against a saved gid.
func savedGID(gid int) int {
	if gid == 65534 {
		return 65533
	}
	return 65534
}
