//go:build linux

package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/record"
)

// benchAPI is the HTTP API served from this process on a loopback
// listener, with one bearer token of scope runs:write, and a client of it.
type benchAPI struct {
	handler *httpapi.Handler
	srv     *http.Server
	base    string
	token   string
	hc      *http.Client
}

// startAPI serves the real httpapi handler, on the run's Redis, with
// net/http on 127.0.0.1.
func (h *harness) startAPI() (*benchAPI, error) {
	var tb [24]byte
	_, _ = rand.Read(tb[:])
	token := hex.EncodeToString(tb[:])
	toks, err := httpapi.ParseTokens("bench-tokens", strings.NewReader("bench "+string(httpapi.ScopeRunsWrite)+" "+token+"\n"))
	if err != nil {
		return nil, err
	}
	hd, err := httpapi.New(h.rdb, httpapi.Options{Tokens: toks, Retention: 2 * time.Hour})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hd.Close()
		return nil, err
	}
	a := &benchAPI{handler: hd, srv: &http.Server{Handler: hd, ReadHeaderTimeout: 10 * time.Second},
		base: "http://" + ln.Addr().String(), token: token,
		// One kept-alive connection, as an SDK's client keeps.
		hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}},
	}
	go a.srv.Serve(ln)
	return a, nil
}

func (a *benchAPI) stop() {
	a.handler.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	a.hc.CloseIdleConnections()
}

// call sends method path with body and decodes the answer into out, which
// must come with status want.
func (a *benchAPI) call(ctx context.Context, method, path, body string, want int, out any) error {
	return apiCall(ctx, a.hc, a.base, a.token, method, path, body, want, out)
}

// apiCall sends method base+path with body and a bearer token, and decodes
// an answer of status want into out (nil: the answer is not read).
func apiCall(ctx context.Context, hc *http.Client, base, token, method, path, body string, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s (want %d): %s", method, path, resp.Status, want, bytes.TrimSpace(b[:min(len(b), 1024)]))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: the answer: %w", method, path, err)
	}
	return nil
}

// openSession is POST /v1/sessions of a spec with an empty session block.
func (a *benchAPI) openSession(ctx context.Context, q, runID string) (sessionHandle, error) {
	spec, _ := json.Marshal(map[string]any{"version": 1, "queue": q, "run_id": runID, "session": map[string]any{}})
	var o httpapi.SessionOpened
	if err := a.call(ctx, http.MethodPost, "/v1/sessions", string(spec), http.StatusCreated, &o); err != nil {
		return nil, err
	}
	if o.SessionID == "" {
		return nil, fmt.Errorf("POST /v1/sessions: no session_id in the answer")
	}
	return &httpSession{api: a, sid: o.SessionID}, nil
}

// httpSession is a session driven through the HTTP API.
type httpSession struct {
	api *benchAPI
	sid string
}

func (s *httpSession) id() string { return s.sid }

func (s *httpSession) step(ctx context.Context) (*record.Step, error) {
	var st record.Step
	err := s.api.call(ctx, http.MethodPost, "/v1/sessions/"+s.sid+"/steps", `{"run":["true"]}`, http.StatusOK, &st)
	return &st, err
}

func (s *httpSession) close(ctx context.Context) (*record.Run, error) {
	var rec record.Run
	err := s.api.call(ctx, http.MethodPost, "/v1/sessions/"+s.sid+"/close", "", http.StatusOK, &rec)
	return &rec, err
}

// sessionTable formats the session section: a figure per line, a path
// per column, and the targets met or not.
func sessionTable(r *SessionReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nSessions, ms: an idle worker (concurrency %d, its default -max-sessions); %d sessions per path and round, one at a time, 15–25 ms apart; each: open, 1+%d steps of `true`, close\n",
		latencyConcurrency, r.Sessions, r.Steps)
	fmt.Fprintln(&b, "HTTP API: the real handler on 127.0.0.1 (net/http, a kept-alive connection, a runs:write token); Go client: airlock.Client.OpenSession, Session.Run")
	t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprint(t, "figure\t")
	for _, p := range r.Paths {
		fmt.Fprintf(t, "%s\t", p.Path)
	}
	fmt.Fprintln(t, "target (issue 23), on the p50\t")
	line := func(name string, get func(SessionPath) Stat, target func(SessionPath) string) {
		fmt.Fprintf(t, "%s\t", name)
		var tg []string
		for _, p := range r.Paths {
			fmt.Fprintf(t, "%s\t", span(get(p)))
			if target != nil {
				tg = append(tg, target(p))
			}
		}
		fmt.Fprintf(t, "%s\t\n", strings.Join(tg, "; "))
	}
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	line("open → first step's answer p50", func(p SessionPath) Stat { return p.OpenP50 },
		func(p SessionPath) string {
			return fmt.Sprintf("%s ≤ %.0f: %s", p.Path, p.OpenTargetMS, met(p.OpenMet))
		})
	line("open → first step's answer p90", func(p SessionPath) Stat { return p.OpenP90 }, nil)
	line("open → first step's answer p99", func(p SessionPath) Stat { return p.OpenP99 }, nil)
	line("step p50", func(p SessionPath) Stat { return p.StepP50 },
		func(p SessionPath) string {
			return fmt.Sprintf("%s ≤ %.0f: %s", p.Path, p.StepTargetMS, met(p.StepMet))
		})
	line("step p90", func(p SessionPath) Stat { return p.StepP90 }, nil)
	line("step p99", func(p SessionPath) Stat { return p.StepP99 }, nil)
	line("  open alone (its answer) p50", func(p SessionPath) Stat { return p.OpenedP50 }, nil)
	line("  a step's own run (duration_ms) p50", func(p SessionPath) Stat { return p.StepRunP50 }, nil)
	line("  close → the run's record p50", func(p SessionPath) Stat { return p.CloseP50 }, nil)
	line("  close → the run's record p99", func(p SessionPath) Stat { return p.CloseP99 }, nil)
	t.Flush()
	fmt.Fprintln(&b, "  anchors, public figures of other services (not measured here):")
	for _, a := range r.Anchors {
		fmt.Fprintf(&b, "    %s: %.0f ms (%s)\n", a.What, a.MS, a.Source)
	}
	return b.String()
}
