//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// SecSession measures sessions on an idle worker (concurrency 2, its
// default -max-sessions): the time from opening one to the answer of its
// first step, then the round trip of each further step, through the HTTP
// API (the real handler on a loopback listener) and through the Go client.
const SecSession = "session"

// sessionSteps are the steps of `true` timed in each session after its
// first one (which is timed with the open).
const sessionSteps = 20

// Paths a session is driven through.
const (
	sessionHTTP = "HTTP API"
	sessionGo   = "Go client"
)

// Targets of issue 23, in milliseconds, on the p50 (median over rounds).
const (
	TargetSessionOpenMS     = 50.0 // open → the first step's answer, either path
	TargetSessionStepHTTPMS = 10.0 // one step of `true` through the HTTP API
	TargetSessionStepGoMS   = 5.0  // one step of `true` through the Go client
)

// SessionAnchor is a public figure of another sandbox service, for scale:
// not measured here.
type SessionAnchor struct {
	What   string  `json:"what"`
	MS     float64 `json:"ms"`
	Source string  `json:"source"`
}

// SessionAnchors are the figures the session section is read against.
var SessionAnchors = []SessionAnchor{
	{What: "Daytona: create → first command, median", MS: 110, Source: "ComputeSDK's public sandbox leaderboard"},
	{What: "E2B: create → first command, median", MS: 440, Source: "ComputeSDK's public sandbox leaderboard"},
	{What: "E2B: sandbox start (~)", MS: 150, Source: "E2B's own statement"},
}

// SessionReport is the session section's result.
type SessionReport struct {
	Sessions int `json:"sessions_per_round"` // per path
	// Steps are the steps timed after the first in each session.
	Steps   int             `json:"steps_per_session"`
	Paths   []SessionPath   `json:"paths"`
	Anchors []SessionAnchor `json:"anchors"`
}

// SessionPath is one path's figures, in milliseconds, over rounds.
type SessionPath struct {
	Path string `json:"path"`
	// Open → the first step's answer: POST /v1/sessions (201), then the
	// first POST …/steps (200); or OpenSession, then Session.Run.
	OpenP50 Stat `json:"open_first_step_p50_ms"`
	OpenP90 Stat `json:"open_first_step_p90_ms"`
	OpenP99 Stat `json:"open_first_step_p99_ms"`
	// One further step of `true`, call to answer.
	StepP50 Stat `json:"step_p50_ms"`
	StepP90 Stat `json:"step_p90_ms"`
	StepP99 Stat `json:"step_p99_ms"`
	// Breakdown: the open alone (its answer), the step's own run as its
	// record says (duration_ms), and the close (to the run's record).
	OpenedP50  Stat `json:"open_answered_p50_ms"`
	StepRunP50 Stat `json:"step_duration_ms_p50"`
	CloseP50   Stat `json:"close_p50_ms"`
	CloseP99   Stat `json:"close_p99_ms"`
	// The targets and whether the medians over rounds meet them.
	OpenTargetMS float64 `json:"open_target_ms"`
	OpenMet      bool    `json:"open_target_met"`
	StepTargetMS float64 `json:"step_target_ms"`
	StepMet      bool    `json:"step_target_met"`
}

// sessionSamples are one round's samples of one path, in milliseconds.
type sessionSamples struct {
	open, opened, step, stepRun, close []float64
}

// sessionHandle is an open session, as a path drives it.
type sessionHandle interface {
	id() string
	step(ctx context.Context) (*record.Step, error)
	close(ctx context.Context) (*record.Run, error)
}

// sessionOpener opens a session in queue q with run id runID.
type sessionOpener func(ctx context.Context, q, runID string) (sessionHandle, error)

// sessionRound starts a fresh worker and the HTTP API, and times both
// paths, the one that goes first alternating with the round.
func (h *harness) sessionRound(ctx context.Context, round int, acc *sessionAcc) error {
	q := h.queue("session")
	srv, root, err := h.startServer(ctx, systemAirlock, latencyConcurrency, q)
	if err != nil {
		return err
	}
	defer h.forget(srv, root)
	api, err := h.startAPI()
	if err != nil {
		return fmt.Errorf("HTTP API: %w", err)
	}
	defer api.stop()
	var ids []string
	defer func() { h.deleteSessions(ctx, ids) }()
	openers := map[string]sessionOpener{sessionHTTP: api.openSession, sessionGo: h.openGoSession}
	order := []string{sessionHTTP, sessionGo}
	if round%2 == 1 {
		order = []string{sessionGo, sessionHTTP}
	}
	for _, p := range order {
		s, err := h.timeSessions(ctx, srv, openers[p], p, q, h.sz.Sessions, &ids)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		acc.add(p, s)
		h.logf("  session    %-9s: open → first step p50 %.1f ms, p99 %.1f ms; step p50 %.2f ms, p99 %.2f ms (run %.2f ms); %d sessions",
			p, percentile(s.open, 50), percentile(s.open, 99), percentile(s.step, 50), percentile(s.step, 99), percentile(s.stepRun, 50), len(s.open))
	}
	return srv.stop()
}

// timeSessions opens n sessions one at a time after a warm-up, each after
// a random pause of 15-25 ms (the worker is back to polling its idle
// queue, at a random phase), runs 1+sessionSteps steps of `true` in each,
// closes it and waits until the worker has let it go (untimed: a worker
// holds one session at concurrency 2). It appends the sessions' ids to ids.
func (h *harness) timeSessions(ctx context.Context, srv *child, open sessionOpener, path, q string, n int, ids *[]string) (sessionSamples, error) {
	var s sessionSamples
	one := func(i, steps int, s *sessionSamples) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		t0 := time.Now()
		sh, err := open(ctx, q, fmt.Sprintf("%s-%s-%d", q, map[string]string{sessionHTTP: "http", sessionGo: "go"}[path], i))
		if err != nil {
			return fmt.Errorf("open: %w\n%s", err, srv.logs.String())
		}
		opened := time.Since(t0)
		*ids = append(*ids, sh.id())
		for k := 0; k <= steps; k++ {
			ts := time.Now()
			st, err := sh.step(ctx)
			el := time.Since(ts)
			if err == nil && (st.Verdict != record.VerdictOK || st.ExitCode == nil || *st.ExitCode != 0) {
				err = fmt.Errorf("verdict %s, exit code %v: %s", st.Verdict, st.ExitCode, st.Error)
			}
			if err != nil {
				return fmt.Errorf("session %s, step %d: %w", sh.id(), k+1, err)
			}
			if s == nil {
				continue
			}
			if k == 0 {
				s.open = append(s.open, ms(time.Since(t0)))
				s.opened = append(s.opened, ms(opened))
			} else {
				s.step = append(s.step, ms(el))
			}
			s.stepRun = append(s.stepRun, st.DurationMS)
		}
		tc := time.Now()
		rec, err := sh.close(ctx)
		if err == nil && (rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK || len(rec.Steps) != steps+1) {
			err = fmt.Errorf("state %s, verdict %s, %d steps: %s", rec.State, rec.Verdict, len(rec.Steps), rec.Error)
		}
		if err != nil {
			return fmt.Errorf("session %s: close: %w", sh.id(), err)
		}
		if s != nil {
			s.close = append(s.close, ms(time.Since(tc)))
		}
		return h.awaitSessionEnded(ctx, sh.id())
	}
	if err := one(-1, 2, nil); err != nil {
		return s, fmt.Errorf("warm-up: %w", err)
	}
	for i := range n {
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(15*time.Millisecond + rand.N(10*time.Millisecond)):
		}
		if err := one(i, sessionSteps, &s); err != nil {
			return s, err
		}
	}
	for _, xs := range [][]float64{s.open, s.opened, s.step, s.stepRun, s.close} {
		slices.Sort(xs)
	}
	return s, nil
}

// awaitSessionEnded waits until the session's state says ended: the
// worker has given its place back (it does so right after the record).
func (h *harness) awaitSessionEnded(ctx context.Context, id string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, in, err := h.client.Session(ctx, id)
		if err != nil {
			return fmt.Errorf("session %s: %w", id, err)
		}
		if in.State == session.StateEnded {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("session %s still %s 10s after its close", id, in.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// deleteSessions removes the sessions' state from Redis (their answers
// expire within session.AnswerTTL).
func (h *harness) deleteSessions(ctx context.Context, ids []string) {
	ctx, cancel := withTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	for _, id := range ids {
		key := "airlock:session:{" + id + "}"
		errs = append(errs, h.rdb.Unlink(ctx, key, key+":calls").Err())
	}
	if err := errors.Join(errs...); err != nil {
		h.logf("deleting the sessions' state: %v", err)
	}
}

// goSession is a session driven through the Go client.
type goSession struct{ s *airlock.Session }

func (g goSession) id() string { return g.s.ID() }

func (g goSession) step(ctx context.Context) (*record.Step, error) {
	return g.s.Run(ctx, tasks.Step{Run: []string{"true"}})
}

func (g goSession) close(ctx context.Context) (*record.Run, error) { return g.s.Close(ctx) }

func (h *harness) openGoSession(ctx context.Context, q, runID string) (sessionHandle, error) {
	s, err := h.client.OpenSession(ctx, &tasks.Spec{Version: 1, Queue: q, RunID: runID, Session: &tasks.Session{}})
	if err != nil {
		return nil, err
	}
	return goSession{s}, nil
}

// sessionAcc gathers the rounds of both paths.
type sessionAcc struct {
	rounds map[string][]sessionSamples
}

func newSessionAcc() *sessionAcc { return &sessionAcc{rounds: map[string][]sessionSamples{}} }

func (a *sessionAcc) add(path string, s sessionSamples) { a.rounds[path] = append(a.rounds[path], s) }

func (a *sessionAcc) report(sessions int) *SessionReport {
	r := &SessionReport{Sessions: sessions, Steps: sessionSteps, Anchors: SessionAnchors}
	for _, p := range []string{sessionHTTP, sessionGo} {
		rounds := a.rounds[p]
		if len(rounds) == 0 {
			continue
		}
		over := func(xs func(sessionSamples) []float64, pct float64) Stat {
			var v []float64
			for _, s := range rounds {
				v = append(v, percentile(xs(s), pct))
			}
			return newStat(v)
		}
		open := func(s sessionSamples) []float64 { return s.open }
		step := func(s sessionSamples) []float64 { return s.step }
		row := SessionPath{Path: p,
			OpenP50: over(open, 50), OpenP90: over(open, 90), OpenP99: over(open, 99),
			StepP50: over(step, 50), StepP90: over(step, 90), StepP99: over(step, 99),
			OpenedP50:    over(func(s sessionSamples) []float64 { return s.opened }, 50),
			StepRunP50:   over(func(s sessionSamples) []float64 { return s.stepRun }, 50),
			CloseP50:     over(func(s sessionSamples) []float64 { return s.close }, 50),
			CloseP99:     over(func(s sessionSamples) []float64 { return s.close }, 99),
			OpenTargetMS: TargetSessionOpenMS, StepTargetMS: TargetSessionStepGoMS,
		}
		if p == sessionHTTP {
			row.StepTargetMS = TargetSessionStepHTTPMS
		}
		row.OpenMet, row.StepMet = row.OpenP50.Median <= row.OpenTargetMS, row.StepP50.Median <= row.StepTargetMS
		r.Paths = append(r.Paths, row)
	}
	return r
}
