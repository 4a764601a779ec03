//go:build linux

package e2e

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// chaosSession is one session kept open and stepping through a chaos
// run: each step appends its number to out/log.
type chaosSession struct {
	s          *airlock.Session
	applied    []int  // steps answered ok
	unsure     []int  // steps whose call failed otherwise (Redis down, no answer)
	notApplied int    // calls answered "not applied"
	ended      string // how it ended, if it did
}

// ChaosSessionFigures is what the sessions of a chaos run report.
type chaosSessionFigures struct {
	Sessions   int `json:"sessions"`
	Steps      int `json:"steps_applied"`
	NotApplied int `json:"calls_not_applied"`
	Unsure     int `json:"calls_failed_otherwise"`
	Continued  int `json:"sessions_continued"`
	Ended      int `json:"sessions_ended_saying_why"`
	RunTwice   int `json:"steps_run_twice"`
	Lost       int `json:"steps_lost"`
}

// chaosSessions opens n sessions and has each step about once a second
// until stop is closed; it returns them once every one stopped.
func chaosSessions(ctx context.Context, t *testing.T, c *airlock.Client, queue string, n int, stop <-chan struct{}) []*chaosSession {
	t.Helper()
	out := make([]*chaosSession, n)
	var wg sync.WaitGroup
	for i := range out {
		cs := &chaosSession{}
		out[i] = cs
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := &tasks.Spec{Version: 1, Queue: queue, Timeout: limits.Duration(15 * time.Minute),
				Session: &tasks.Session{IdleTimeout: limits.Duration(10 * time.Minute)}}
			for cs.s == nil {
				s, err := c.OpenSession(ctx, spec)
				if err == nil {
					cs.s = s
					break
				}
				select {
				case <-stop:
					cs.ended = "never opened: " + err.Error()
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
			for k := 1; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(500+k*37%500) * time.Millisecond):
				}
				st, err := cs.s.Run(ctx, tasks.Step{Run: []string{"sh", "-c", "echo " + strconv.Itoa(k) + " >> out/log"}})
				switch {
				case err == nil && st.Verdict == record.VerdictOK:
					cs.applied = append(cs.applied, k)
				case errors.Is(err, airlock.ErrNotApplied):
					cs.notApplied++
				case errors.Is(err, airlock.ErrSessionEnded):
					cs.ended = err.Error()
					return
				default:
					cs.unsure = append(cs.unsure, k)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// checkChaosSessions reads each session's log: no step there twice, every
// step answered ok there, none there that no call sent; a session that
// ended says why. The sessions still open are deleted.
func checkChaosSessions(ctx context.Context, t *testing.T, c *airlock.Client, queue string, all []*chaosSession) chaosSessionFigures {
	t.Helper()
	fig := chaosSessionFigures{Sessions: len(all)}
	for i, cs := range all {
		fig.Steps += len(cs.applied)
		fig.NotApplied += cs.notApplied
		fig.Unsure += len(cs.unsure)
		if cs.ended != "" {
			fig.Ended++
			if cs.s != nil {
				if rec, err := c.Status(ctx, queue, cs.s.ID()); err != nil || rec.Error == "" && !record.Final(rec.State) {
					t.Errorf("session %d ended (%s) with no record saying why: %+v, %v", i, cs.ended, rec, err)
				}
			}
			continue
		}
		var log []byte
		var err error
		for range 30 { // a session moving between workers answers once resumed
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			log, err = cs.s.ReadFile(rctx, "out/log")
			cancel()
			if err == nil || errors.Is(err, airlock.ErrSessionEnded) {
				break
			}
		}
		if err != nil {
			fig.Ended++
			t.Logf("session %d: reading its log: %v", i, err)
			continue
		}
		fig.Continued++
		seen := map[int]bool{}
		for _, f := range strings.Fields(string(log)) {
			k, _ := strconv.Atoi(f)
			if seen[k] {
				fig.RunTwice++
				t.Errorf("session %d: step %d ran twice (log %q)", i, k, log)
			}
			seen[k] = true
			if !slices.Contains(cs.applied, k) && !slices.Contains(cs.unsure, k) {
				t.Errorf("session %d: step %d in the log was answered not applied", i, k)
			}
		}
		for _, k := range cs.applied {
			if !seen[k] {
				fig.Lost++
				t.Errorf("session %d: step %d answered ok is not in its log %q", i, k, log)
			}
		}
		_, _ = cs.s.Delete(ctx)
	}
	return fig
}
