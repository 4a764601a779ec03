//go:build linux

package sandbox

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReap: reap returns a child's exit status and resource usage, for a
// child still running and for one that has already exited.
func TestReap(t *testing.T) {
	start := func(script string) int {
		t.Helper()
		pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", script}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	tests := []struct {
		name, script string
		settle       bool // wait until it has exited before reap
		wantCode     int
	}{
		{"running", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3", false, 3},
		{"exited", "exit 5", true, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := start(tt.script)
			if tt.settle {
				var info unix.Siginfo
				if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
					t.Fatal(err)
				}
			}
			var ws unix.WaitStatus
			var ru unix.Rusage
			if err := reap(pid, &ws, &ru); err != nil {
				t.Fatal(err)
			}
			if !ws.Exited() || ws.ExitStatus() != tt.wantCode {
				t.Errorf("status %v, want exit code %d", describeStatus(ws), tt.wantCode)
			}
			if tt.name == "running" && ru.Utime.Sec == 0 && ru.Utime.Usec == 0 && ru.Stime.Sec == 0 && ru.Stime.Usec == 0 {
				t.Errorf("no CPU time in the rusage of a busy child: %+v", ru)
			}
			if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != unix.ECHILD {
				t.Errorf("after reap, wait4 = %v, want ECHILD (reaped)", err)
			}
		})
	}
}
