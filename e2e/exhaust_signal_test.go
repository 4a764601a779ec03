//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// helpersOf lists the pids of the slot helpers the worker pid started.
func helpersOf(t *testing.T, worker int) []int {
	t.Helper()
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cl, []byte("__airlock_slot_helper")) {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		if regexp.MustCompile(`(?m)^PPid:\s+` + strconv.Itoa(worker) + `$`).Match(st) {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// TestForgedSignals: a step forges the signals of a crash (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGABRT) with SI_QUEUE (rt_tgsigqueueinfo) and
// SI_TKILL (tgkill) to every thread of its slot's helper, then every
// signal, 1 to 64, in every way a process of its uid can send one
// (probe.c's forge). The task runs once, ok; the same helper runs the
// next task; the worker logged no helper death, restart or traceback.
// Landlock (ABI 6+) scopes signals: the threads outside the steps' domain
// refuse them with EPERM, the spawner thread, in it, takes them; with
// -landlock=false every thread takes them.
func TestForgedSignals(t *testing.T) {
	t.Parallel()
	for _, landlock := range []bool{true, false} {
		t.Run(fmt.Sprintf("landlock=%v", landlock), func(t *testing.T) {
			t.Parallel()
			flags := append(probeBind(t), "-concurrency", "1")
			if !landlock {
				flags = append(flags, "-landlock=false", "-isolation=best-effort")
			}
			b := setup(t, flags...)
			forgeSignals(t, b, landlock)
		})
	}
}

func forgeSignals(t *testing.T, b *bundle, landlock bool) {
	worker := b.worker.cmd.Process.Pid
	before := helpersOf(t, worker)
	if len(before) != 1 {
		t.Fatalf("helpers of the worker: %v, want one", before)
	}
	rec := b.run(`{"version": 1, "steps": [{"run": ["/opt/airlock-probe/probe", "forge-crash-signals", "forge-signals"]}]}`)
	st := stepOf(t, rec, 0)
	if rec.Verdict != record.VerdictOK || st.Verdict != record.VerdictOK || rec.Attempt != 1 {
		t.Fatalf("the forging task: verdict %s, step %s, attempt %d, want ok, ok, 1:\n%s", rec.Verdict, st.Verdict, rec.Attempt, mustJSON(t, rec))
	}
	scoped := strings.Contains(rec.Isolation.Landlock, "signals")
	if scoped != landlock {
		t.Logf("landlock tier %q: signals scoped: %v", rec.Isolation.Landlock, scoped)
	}
	for _, check := range []string{"forge-crash-signals", "forge-signals"} {
		m := regexp.MustCompile(`(?m)^` + check + ` threads (\d+) sent (\d+) refused (\d+) (\S+)$`).FindStringSubmatch(st.Stdout)
		if m == nil {
			t.Fatalf("probe output %q: no %s line", st.Stdout, check)
		}
		threads, _ := strconv.Atoi(m[1])
		sent, _ := strconv.Atoi(m[2])
		switch {
		case threads < 2 || sent < 10: // 5 signals, 2 ways, to the spawner thread at least
			t.Fatalf("%s: %q: want sends to the helper's threads accepted", check, m[0])
		case !scoped && m[3] != "0":
			t.Fatalf("%s: %q: without Landlock's scope, want every send accepted", check, m[0])
		case scoped && m[3] != "0" && m[4] != "EPERM":
			t.Fatalf("%s: %q: want sends refused only by Landlock's scope (EPERM)", check, m[0])
		}
		t.Log(m[0])
	}
	next := b.run(`{"version": 1, "steps": [{"run": ["echo", "hello"]}]}`)
	if next.Verdict != record.VerdictOK || next.Attempt != 1 || stepOf(t, next, 0).Stdout != "hello\n" {
		t.Fatalf("the next task:\n%s", mustJSON(t, next))
	}
	if after := helpersOf(t, worker); !slices.Equal(after, before) {
		t.Errorf("helpers before %v, after %v: want the same one", before, after)
	}
	logs := b.worker.logs.String()
	for _, never := range []string{"slot helper died", "airlock slot helper", "replacing the helper", "goroutine ", "SIGSEGV", "SIGBUS"} {
		if strings.Contains(logs, never) {
			t.Errorf("the worker's log holds %q:\n%s", never, logs)
		}
	}
}

// TestProcHostFacts: what /proc would tell a step of the host: its boot
// command line, boot id, block devices and swap are masked or the slot's
// own; its cgroup reads "/" in every hierarchy (cgroup v1: the helper's
// spawner thread joins the slot's group, then takes a cgroup namespace).
func TestProcHostFacts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "cat /proc/cmdline; echo --; cat /proc/sys/kernel/random/boot_id; echo --; cat /proc/self/cgroup; echo --; cat /proc/partitions /proc/diskstats /proc/swaps"]}]}`)
	st := stepOf(t, rec, 0)
	parts := strings.Split(st.Stdout, "--\n")
	if st.Verdict != record.VerdictOK || len(parts) != 4 {
		t.Fatalf("step:\n%s", mustJSON(t, rec))
	}
	hostBoot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if parts[0] != "" || parts[3] != "" {
		t.Errorf("/proc/cmdline %q, partitions, diskstats, swaps %q: want them empty", parts[0], parts[3])
	}
	if id := strings.TrimSpace(parts[1]); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) || id == strings.TrimSpace(string(hostBoot)) {
		t.Errorf("boot_id %q: want a UUID of the slot's own, not the host's %q", id, hostBoot)
	}
	cg := strings.TrimSpace(parts[2])
	if !strings.Contains(rec.Isolation.Memory, "v1") {
		t.Logf("memory tier %q: the cgroup namespace is for cgroup v1; /proc/self/cgroup %q", rec.Isolation.Memory, cg)
		return
	}
	for _, l := range strings.Split(cg, "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) != 3 || f[2] != "/" {
			t.Errorf("/proc/self/cgroup line %q: want the group as /", l)
		}
	}
	t.Logf("boot_id %s; /proc/self/cgroup %q", strings.TrimSpace(parts[1]), cg)
}
