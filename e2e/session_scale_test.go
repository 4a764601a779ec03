//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// treePSS is the proportional set size, in bytes, of process pid and
// every process below it (the worker and its sandbox helpers).
func treePSS(t *testing.T, pid int) int64 {
	t.Helper()
	children := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	var total int64
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if kb, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
				total += n << 10
			}
		}
		f.Close()
	}
	return total
}

// TestThousandIdleSessions: slots serve steps, not sessions. One worker
// of two slots holds 1,000 open sessions, each with a file of its own;
// one-shot runs still run beside them; every session still answers a
// step that reads its file; the worker and its helpers grow by less than
// 1 MiB of memory (PSS) per idle session.
func TestThousandIdleSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,000 sessions")
	}
	const n = 1000
	b := setup(t, "-concurrency", "2")
	pid := b.worker.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	open := func(i int) (*airlock.Session, time.Duration, error) {
		spec := b.spec(fmt.Sprintf(`{"version":1,"timeout":"10m","session":{"idle_timeout":"5m"},
			"files":{"in/note.txt":"session %d\n"}}`, i))
		start := time.Now()
		s, err := b.client.OpenSession(ctx, spec)
		return s, time.Since(start), err
	}
	// Warm: the helpers' first steps, the worker's pools.
	for i := range 4 {
		s, _, err := open(-1 - i)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(ctx, tasks.Step{Run: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	base := treePSS(t, pid)

	sessions := make([]*airlock.Session, n)
	opens := make([]time.Duration, n)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s, d, err := open(i)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("open %d: %w", i, err))
				}
				sessions[i], opens[i] = s, d
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d opens failed, the first: %v", len(errs), n, errs[0])
	}
	t.Logf("%d sessions open in %s: open → first answer p50 %s, p90 %s, p99 %s", n, time.Since(start).Round(time.Millisecond),
		pct(opens, .5), pct(opens, .9), pct(opens, .99))
	time.Sleep(time.Second)
	after := treePSS(t, pid)
	per := (after - base) / n
	t.Logf("worker and helpers PSS: %.1f MiB before, %.1f MiB with %d idle sessions: %d KiB per session", float64(base)/(1<<20), float64(after)/(1<<20), n, per>>10)
	if per > 1<<20 {
		t.Errorf("%d bytes of PSS per idle session, want at most 1 MiB", per)
	}

	// Opens one at a time, with the 1,000 open: open → first answer.
	var single []time.Duration
	for i := range 20 {
		s, d, err := open(n + i)
		if err != nil {
			t.Fatal(err)
		}
		single = append(single, d)
		if _, err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("open → first answer, one at a time, with %d open: p50 %s, max %s", n, pct(single, .5), pct(single, 1))

	// One-shot runs beside them.
	for i := range 3 {
		rec := b.run(`{"version":1,"steps":[{"run":["sh","-c","echo one-shot"]}]}`)
		if rec.State != record.StateCompleted || !strings.Contains(rec.Steps[0].Stdout, "one-shot") {
			t.Fatalf("one-shot run %d beside %d sessions: %s %s", i, n, rec.State, rec.Error)
		}
	}

	// Every session answers a step, from its own workspace; then a step
	// of true, timed, on each.
	var steps []time.Duration
	for i, s := range sessions {
		st, err := s.Run(ctx, tasks.Step{Run: []string{"cat", "in/note.txt"}})
		if err != nil || st.Stdout != fmt.Sprintf("session %d\n", i) {
			t.Fatalf("session %d: %+v, %v", i, st, err)
		}
	}
	for _, s := range sessions {
		t0 := time.Now()
		if _, err := s.Run(ctx, tasks.Step{Run: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, time.Since(t0))
	}
	t.Logf("a step of true with %d sessions open: p50 %s, p90 %s, p99 %s", n, pct(steps, .5), pct(steps, .9), pct(steps, .99))

	// All deleted: nothing of them stays on the worker.
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Delete(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("delete %s: %v", s.ID(), err)
			}
		}()
	}
	wg.Wait()
	store := filepath.Join(filepath.Dir(b.root), "sessions")
	if !eventually(20*time.Second, func() bool {
		ents, _ := os.ReadDir(store)
		return len(ents) == 0
	}) {
		ents, _ := os.ReadDir(store)
		t.Errorf("%d checkpoints left after every session ended", len(ents))
	}
}

// TestStepCwd: a step starts in its cwd, below the workspace, in a spec
// and in a session; a missing one fails the step, never the worker.
func TestStepCwd(t *testing.T) {
	b := setup(t)
	rec := b.run(`{"version":1,"steps":[{"run":["mkdir","-p","src/app"]},{"name":"here","run":["pwd"],"cwd":"src/app"},
		{"name":"gone","run":["pwd"],"cwd":"nowhere"}]}`)
	if len(rec.Steps) != 3 || rec.Steps[1].Stdout != "/workspace/src/app\n" || rec.Steps[1].Cwd != "src/app" {
		t.Fatalf("spec step in cwd: %+v", rec.Steps)
	}
	if rec.Steps[2].Verdict != record.VerdictExecError {
		t.Errorf("a missing cwd: %s %s", rec.Steps[2].Verdict, rec.Steps[2].Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"1m","session":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Delete(context.WithoutCancel(ctx))
	st, err := s.Run(ctx, tasks.Step{Run: []string{"pwd"}, Cwd: "out"})
	if err != nil || st.Stdout != "/workspace/out\n" {
		t.Fatalf("session step in cwd out: %+v, %v", st, err)
	}
	if _, err := s.Run(ctx, tasks.Step{Run: []string{"pwd"}, Cwd: "../etc"}); err == nil || !strings.Contains(err.Error(), "step.cwd") {
		t.Errorf("a cwd with ..: %v, want an error naming step.cwd", err)
	}
}
