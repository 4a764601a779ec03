//go:build linux

package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSessionSection runs the session section alone at a tiny size
// against a real worker and the real HTTP API: every figure is produced,
// ordered as percentiles are, each step's own run fits in its round trip,
// the open alone in the open and first step, and the targets are judged
// from the figures. It asserts no speed.
func TestSessionSection(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real worker for a few seconds; not with -short")
	}
	rep, table := runTiny(t, 2*time.Minute, []string{SecSession})

	s := rep.Session
	if s == nil || s.Sessions != 10 || s.Steps != sessionSteps || len(s.Paths) != 2 || len(s.Anchors) != len(SessionAnchors) {
		t.Fatalf("session report: %+v", s)
	}
	if rep.Latency != nil || rep.Throughput != nil || rep.Idle != nil {
		t.Errorf("other sections ran: %+v", rep)
	}
	for i, want := range []struct {
		path   string
		target float64
	}{{sessionHTTP, TargetSessionStepHTTPMS}, {sessionGo, TargetSessionStepGoMS}} {
		p := s.Paths[i]
		if p.Path != want.path || p.StepTargetMS != want.target || p.OpenTargetMS != TargetSessionOpenMS {
			t.Errorf("path %d: %s, targets open %v step %v; want %s, %v, %v", i, p.Path, p.OpenTargetMS, p.StepTargetMS, want.path, TargetSessionOpenMS, want.target)
		}
		stats := map[string]Stat{"open p50": p.OpenP50, "open p90": p.OpenP90, "open p99": p.OpenP99,
			"step p50": p.StepP50, "step p90": p.StepP90, "step p99": p.StepP99,
			"open alone": p.OpenedP50, "step run": p.StepRunP50, "close p50": p.CloseP50, "close p99": p.CloseP99}
		for name, st := range stats {
			if len(st.Samples) != 1 || st.Median <= 0 {
				t.Errorf("%s %s: %+v, want one positive sample", p.Path, name, st)
			}
		}
		if !(p.OpenP50.Median <= p.OpenP90.Median && p.OpenP90.Median <= p.OpenP99.Median) ||
			!(p.StepP50.Median <= p.StepP90.Median && p.StepP90.Median <= p.StepP99.Median) {
			t.Errorf("%s: percentiles out of order: open %v %v %v, step %v %v %v", p.Path,
				p.OpenP50.Median, p.OpenP90.Median, p.OpenP99.Median, p.StepP50.Median, p.StepP90.Median, p.StepP99.Median)
		}
		// The open alone is part of open → first step; a step's run as
		// the worker timed it is part of the step's round trip.
		if p.OpenedP50.Median >= p.OpenP50.Median || p.StepRunP50.Median >= p.StepP50.Median {
			t.Errorf("%s: open alone %v ≥ open → first step %v, or step run %v ≥ step %v", p.Path,
				p.OpenedP50.Median, p.OpenP50.Median, p.StepRunP50.Median, p.StepP50.Median)
		}
		if p.OpenMet != (p.OpenP50.Median <= TargetSessionOpenMS) || p.StepMet != (p.StepP50.Median <= want.target) {
			t.Errorf("%s: met open %v step %v, from p50s %v and %v", p.Path, p.OpenMet, p.StepMet, p.OpenP50.Median, p.StepP50.Median)
		}
	}
	for _, want := range []string{"Sessions, ms", "open → first step's answer p50", "HTTP API ≤ 10", "Go client ≤ 5",
		"Daytona: create → first command, median: 110 ms", "E2B: create → first command, median: 440 ms", "ComputeSDK"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Session *SessionReport `json:"session"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Session == nil || len(back.Session.Paths) != 2 ||
		back.Session.Paths[1].StepP50.Median != s.Paths[1].StepP50.Median {
		t.Errorf("JSON: %v, %+v", err, back.Session)
	}
}
