//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/otlptest"
	"github.com/airlock-run/airlock/record"
)

// TestTraceEndToEnd runs the real api and worker binaries with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at a real OTLP/HTTP endpoint (an
// HTTP server of this test decoding the protobuf export requests): a POST
// /v1/runs with a traceparent header yields the API's span, a child of
// the caller's, and the worker's spans of the run below it (fetch, two
// steps, validate, policy, park), all in the caller's trace, which is the
// record's trace_id and in the worker's and the API's log lines; an
// approver's accept through the API (of another trace, linked) and the
// worker's promotion are the park's children, in the run's trace.
func TestTraceEndToEnd(t *testing.T) {
	needRoot(t)
	ep := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ep.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: spans are sent as they end, not every 5s
	t.Setenv("OTEL_SERVICE_NAME", "")
	in := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"total": 3}`)
	}))
	defer in.Close()
	b := setup(t, "-fetch-allow", "127.0.0.1")
	api := newAPIClient(t, startAPI(t, b))
	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerID = "00f067aa0ba902b7"
		approver = "00-11111111111111111111111111111111-2222222222222222-01"
	)
	spec := map[string]any{"version": 1, "queue": b.queue,
		"inputs": []any{map[string]any{"url": in.URL + "/in.json", "path": "in.json"}},
		"steps": []any{
			map[string]any{"name": "copy", "run": []string{"sh", "-c", "mkdir -p out && cp in.json out/result.json"}},
			map[string]any{"name": "check", "run": []string{"true"}},
		},
		"output": map[string]any{"result": "out/result.json", "schema": map[string]any{"type": "object", "required": []string{"total"}}},
	}
	status, _, body := api.do("POST", "/v1/runs", apiAgent, spec, map[string]string{"traceparent": "00-" + traceID + "-" + callerID + "-01"})
	if status != http.StatusCreated {
		t.Fatalf("POST /v1/runs: %d %s", status, body)
	}
	var en httpapi.Enqueued
	if err := json.Unmarshal(body, &en); err != nil {
		t.Fatal(err)
	}
	var rec record.Run
	for deadline := time.Now().Add(2 * time.Minute); rec.State != record.StateParked; {
		api.json("GET", "/v1/runs/"+en.TaskID+"?wait=30s&until=done", apiAgent, nil, http.StatusOK, &rec)
		if record.Final(rec.State) || time.Now().After(deadline) {
			t.Fatalf("run %s: %s/%s %q, want parked", en.TaskID, rec.State, rec.Verdict, rec.Error)
		}
	}
	if rec.TraceID != traceID {
		t.Errorf("record trace_id %q, want the caller's %s", rec.TraceID, traceID)
	}
	if s, _, body := api.do("POST", "/v1/approvals/"+rec.ApprovalID+"/accept", apiApprover, map[string]string{"comment": "ok"},
		map[string]string{"traceparent": approver}); s != http.StatusOK {
		t.Fatalf("accept: %d %s", s, body)
	}
	// Each process exports on its own schedule: wait for the last span
	// of each (the worker's promote, the API's POST and accept).
	spans := ep.Await(time.Minute, func(s []otlptest.Span) bool {
		has := func(name, service string) bool {
			return slices.ContainsFunc(s, func(s otlptest.Span) bool { return s.Name == name && s.Service == service })
		}
		return has("airlock.promote", "airlock-worker") && has("POST /v1/runs", "airlock-api") && has("airlock.accept", "airlock-api")
	})
	find := func(name, service string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range spans {
			if s.Name == name && s.Service == service && s.TraceID == traceID {
				out = append(out, s)
			}
		}
		return out
	}
	one := func(name, service string) otlptest.Span {
		t.Helper()
		got := find(name, service)
		if len(got) != 1 {
			for _, s := range spans {
				t.Logf("span %s (%s) trace %s id %s parent %s", s.Name, s.Service, s.TraceID, s.SpanID, s.Parent)
			}
			t.Fatalf("%d spans %s from %s in trace %s, want 1", len(got), name, service, traceID)
		}
		return got[0]
	}
	post := one("POST /v1/runs", "airlock-api")
	if post.Parent != callerID || post.Attrs["http.response.status_code"] != "201" {
		t.Errorf("API span: parent %s (want the caller's %s), attributes %v", post.Parent, callerID, post.Attrs)
	}
	run := one("airlock.run", "airlock-worker")
	if run.Parent != post.SpanID || run.Attrs["airlock.task_id"] != en.TaskID || run.Attrs["airlock.state"] != "parked" {
		t.Errorf("run span: parent %s (want the API's %s), attributes %v", run.Parent, post.SpanID, run.Attrs)
	}
	for _, name := range []string{"airlock.fetch", "airlock.validate", "airlock.policy", "airlock.park"} {
		if s := one(name, "airlock-worker"); s.Parent != run.SpanID {
			t.Errorf("%s: parent %s, want the run's %s", name, s.Parent, run.SpanID)
		}
	}
	if steps := find("airlock.step", "airlock-worker"); len(steps) != 2 || steps[0].Parent != run.SpanID || steps[1].Parent != run.SpanID {
		t.Errorf("step spans %+v, want 2 children of the run", steps)
	}
	park := one("airlock.park", "airlock-worker")
	accept := one("airlock.accept", "airlock-api")
	var request otlptest.Span // the accept's request, in the approver's trace
	for _, s := range spans {
		if s.Name == "POST /v1/approvals/{id}/accept" && s.TraceID == strings.Repeat("1", 32) && s.Parent == "2222222222222222" {
			request = s
		}
	}
	if request.SpanID == "" || accept.Parent != park.SpanID || !slices.Contains(accept.Links, request.SpanID) {
		t.Errorf("accept span: parent %s (want the park's %s), links %v (want the accept request's span %q, a child of the approver's)",
			accept.Parent, park.SpanID, accept.Links, request.SpanID)
	}
	if promote := one("airlock.promote", "airlock-worker"); promote.Parent != park.SpanID || promote.Attrs["airlock.published"] != "true" {
		t.Errorf("promote span: parent %s (want the park's %s), attributes %v", promote.Parent, park.SpanID, promote.Attrs)
	}
	// The worker's log lines of the task carry the trace id.
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(b.worker.logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil || l["task_id"] != en.TaskID {
			continue
		}
		lines++
		if l["trace_id"] != traceID {
			t.Errorf("worker log line %q: trace_id %v", l["message"], l["trace_id"])
		}
	}
	if lines < 4 {
		t.Errorf("%d worker log lines of the task, want at least 4 (start, input, steps, end)", lines)
	}
}
