//go:build linux

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The exhaustion tests (exhaust_*_test.go) attack the worker process
// around the sandbox with one step or one spec, and measure what the
// attack cost the worker from /proc: its peak and current resident set,
// and its open descriptors.

// procStats is what /proc says of a process's memory and descriptors.
type procStats struct {
	HWM, RSS int64 // VmHWM and VmRSS, bytes
	FDs      int   // entries of /proc/PID/fd
}

func (s procStats) String() string {
	return fmt.Sprintf("VmHWM %d MiB, VmRSS %d MiB, %d descriptors", s.HWM>>20, s.RSS>>20, s.FDs)
}

// statsOf reads pid's procStats.
func statsOf(t *testing.T, pid int) procStats {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var s procStats
	for _, l := range strings.Split(string(b), "\n") {
		for _, f := range []struct {
			key string
			dst *int64
		}{{"VmHWM:", &s.HWM}, {"VmRSS:", &s.RSS}} {
			if v, ok := strings.CutPrefix(l, f.key); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err != nil {
					t.Fatalf("%s %q: %v", f.key, v, err)
				}
				*f.dst = n << 10
			}
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	s.FDs = len(ents)
	return s
}

// workerStats reads the bundle's worker's procStats.
func (b *bundle) workerStats() procStats {
	b.t.Helper()
	return statsOf(b.t, b.worker.cmd.Process.Pid)
}

// resetPeak resets the worker's VmHWM to its current resident set
// (clear_refs 5), so that a test measures the peak of its own attack,
// whatever ran before it on the worker.
func (b *bundle) resetPeak() {
	b.t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", b.worker.cmd.Process.Pid), []byte("5"), 0); err != nil {
		b.t.Fatalf("reset the worker's VmHWM: %v", err)
	}
}

// measureEnv carries, to this test binary re-executed as a wrapper, the
// argv to run and the file to write its peak resident set to.
const measureEnv = "AIRLOCK_E2E_MEASURE"

// measuredRun runs cmd (its Path, Args, Stdin, Stdout, Stderr) and returns
// its peak resident set, in bytes. A child's ru_maxrss starts from its
// parent's at fork (exec keeps the larger): the test process, grown by
// the suite, would be counted. So the command runs under this binary
// re-executed, whose fresh image is small, and that wrapper reports the
// command's own rusage.
func measuredRun(t *testing.T, cmd *exec.Cmd) (exitCode int, peak int64) {
	t.Helper()
	out := t.TempDir() + "/maxrss"
	spec, err := json.Marshal(struct {
		Argv []string
		Out  string
	}{append([]string{cmd.Path}, cmd.Args[1:]...), out})
	if err != nil {
		t.Fatal(err)
	}
	w := exec.Command(os.Args[0])
	w.Env = append(os.Environ(), measureEnv+"="+string(spec))
	w.Stdin, w.Stdout, w.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	err = w.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("the wrapper did not report the peak: %v", rerr)
	}
	peak, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return w.ProcessState.ExitCode(), peak
}

// measureChild is the wrapper's side of measuredRun: it runs the argv of
// $AIRLOCK_E2E_MEASURE, writes its ru_maxrss in bytes, and exits with its
// exit code.
func measureChild() int {
	var spec struct {
		Argv []string
		Out  string
	}
	if err := json.Unmarshal([]byte(os.Getenv(measureEnv)), &spec); err != nil || len(spec.Argv) == 0 {
		fmt.Fprintln(os.Stderr, "measure: bad", measureEnv, err)
		return 125
	}
	c := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = os.Environ()
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintln(os.Stderr, "measure:", err)
		return 125
	}
	ru := c.ProcessState.SysUsage().(*syscall.Rusage)
	if err := os.WriteFile(spec.Out, []byte(strconv.FormatInt(ru.Maxrss<<10, 10)), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		return 125
	}
	return c.ProcessState.ExitCode()
}
