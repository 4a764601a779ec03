//go:build linux

package bench

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/record"
)

// SecAPI measures what the HTTP API costs over the Go client, with the
// real api binary (cmd/api, built from the module's source) on a loopback
// port in front of an idle worker (concurrency 2): a trivial run from
// POST /v1/runs to its record by GET /v1/runs/{id}?queue=&wait= (a long poll),
// next to Client.Enqueue then Client.Wait, the two paths taking turns run
// by run; and how many GET /v1/runs/{id} of a finished run it answers per
// second from apiReaders kept-alive connections, without ?queue= (the
// API looks for the task in each queue) and with it.
const SecAPI = "api"

// Targets of the HTTP API (issue 25), on the medians over rounds.
const (
	TargetAPIOverheadMS  = 1.0    // HTTP p50 − Go client p50, enqueue to record
	TargetAPIReadsPerSec = 2000.0 // GET /v1/runs/{id}
)

// Bounds of the read measurement.
const (
	apiReaders = 8
	apiReadFor = 2 * time.Second
)

// APIReport is the api section's result.
type APIReport struct {
	Runs    int `json:"runs_per_round"` // per path
	Readers int `json:"readers"`
	Queues  int `json:"queues"` // in Redis while reading: GET without ?queue= looks in each
	// Enqueue to record, ms: POST then GET ?wait=, or Enqueue then Wait.
	HTTPP50 Stat `json:"http_p50_ms"`
	HTTPP99 Stat `json:"http_p99_ms"`
	GoP50   Stat `json:"go_p50_ms"`
	GoP99   Stat `json:"go_p99_ms"`
	// OverheadP50 is, per round, the HTTP p50 less the Go client's.
	OverheadP50 Stat `json:"overhead_p50_ms"`
	// The enqueue call alone, ms: POST /v1/runs, or Client.Enqueue.
	EnqueueHTTPP50 Stat `json:"enqueue_http_p50_ms"`
	EnqueueGoP50   Stat `json:"enqueue_go_p50_ms"`
	// ReadsPerSec: GET /v1/runs/{id} answered 200 per second; and
	// with ?queue= (ReadsQueuePerSec).
	ReadsPerSec      Stat `json:"reads_per_s"`
	ReadP50          Stat `json:"read_p50_ms"`
	ReadsQueuePerSec Stat `json:"reads_queue_per_s"`
	ReadQueueP50     Stat `json:"read_queue_p50_ms"`
	// The targets and whether the medians meet them.
	OverheadTargetMS float64 `json:"overhead_target_ms"`
	OverheadMet      bool    `json:"overhead_target_met"`
	ReadsTarget      float64 `json:"reads_target_per_s"`
	ReadsMet         bool    `json:"reads_target_met"`
}

// apiAcc gathers the rounds, and the api binary built for them.
type apiAcc struct {
	bin                                          string
	http50, http99, go50, go99, over, eh50, eg50 []float64
	reads, read50, readsQ, readQ50               []float64
	queues                                       int
}

// apiProc is a running api binary.
type apiProc struct {
	cmd   *exec.Cmd
	logs  *logFile
	done  chan struct{}
	err   error
	base  string
	token string
	hc    *http.Client
}

// buildAPI builds cmd/api from the module's source, once.
func (h *harness) buildAPI(ctx context.Context, a *apiAcc) error {
	if a.bin != "" {
		return nil
	}
	dir, ok := moduleDir()
	if !ok {
		return errors.New("the module's source is not above the working directory, so cmd/api cannot be built")
	}
	bin := filepath.Join(h.tmp, "api")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/api")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/api: %v: %s", err, out)
	}
	a.bin = bin
	return nil
}

// startAPIBinary runs the api binary on the run's Redis, on a free
// loopback port, with one token of scopes runs:write and runs:read, and
// waits for its "api started" line.
func (h *harness) startAPIBinary(ctx context.Context, bin string) (*apiProc, error) {
	var tb [24]byte
	_, _ = crand.Read(tb[:])
	token := hex.EncodeToString(tb[:])
	tokens, err := os.CreateTemp(h.tmp, "api-tokens-")
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(tokens, "bench %s,%s %s\n", httpapi.ScopeRunsWrite, httpapi.ScopeRunsRead, httpapi.HashToken(token))
	if err = errors.Join(err, tokens.Close()); err != nil {
		return nil, err
	}
	lf, err := os.CreateTemp(h.tmp, "api-log-")
	if err != nil {
		return nil, err
	}
	// The prefix of the harness's workers and client: theirs is the
	// default, "" (the api's own default spells it "airlock:").
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-redis", h.opt.RedisURL, "-prefix", "", "-tokens", tokens.Name(), "-retention", "2h")
	cmd.Stderr, cmd.Stdout = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &apiProc{cmd: cmd, logs: &logFile{f: lf, keep: h.opt.KeepLogs}, done: make(chan struct{}), token: token,
		hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: apiReaders, IdleConnTimeout: time.Minute}}}
	if err := cmd.Start(); err != nil {
		p.logs.remove()
		return nil, err
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	for deadline := time.Now().Add(30 * time.Second); p.base == ""; time.Sleep(10 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
		for sc.Scan() {
			var l struct{ Message, URL string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "api started" {
				p.base = l.URL
			}
		}
		select {
		case <-p.done:
			defer p.logs.remove()
			return nil, fmt.Errorf("api exited at start: %v\n%s", p.err, p.logs.String())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		default:
		}
		if p.base == "" && time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("api not started after 30s")
		}
	}
	return p, nil
}

// stop ends the api with SIGTERM (a kill after 20s) and removes its log.
func (p *apiProc) stop() {
	defer p.logs.remove()
	p.hc.CloseIdleConnections()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// call sends method path with body and decodes a want answer into out.
func (p *apiProc) call(ctx context.Context, method, path, body string, want int, out any) error {
	return apiCall(ctx, p.hc, p.base, p.token, method, path, body, want, out)
}

// apiRound starts a fresh worker and the api binary, times runs through
// both paths, then the reads.
func (h *harness) apiRound(ctx context.Context, round int, acc *apiAcc) error {
	if err := h.buildAPI(ctx, acc); err != nil {
		return err
	}
	q := h.queue("api")
	srv, root, err := h.startServer(ctx, systemAirlock, latencyConcurrency, q)
	if err != nil {
		return err
	}
	defer h.forget(srv, root)
	api, err := h.startAPIBinary(ctx, acc.bin)
	if err != nil {
		return err
	}
	defer api.stop()
	var httpRun, goRun, httpEnq, goEnq []float64
	var last string
	run := func(i int, viaHTTP bool) error {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		spec := trivialSpec(q, fmt.Sprintf("%s-%d-%v", q, i, viaHTTP))
		t0 := time.Now()
		var rec record.Run
		var enq float64
		if viaHTTP {
			body, _ := json.Marshal(spec)
			var en httpapi.Enqueued
			if err := api.call(wctx, http.MethodPost, "/v1/runs", string(body), http.StatusCreated, &en); err != nil {
				return err
			}
			enq = ms(time.Since(t0))
			// As the example clients do: the queue the POST answered.
			if err := api.call(wctx, http.MethodGet, "/v1/runs/"+en.TaskID+"?queue="+en.Queue+"&wait=1m&until=done", "", http.StatusOK, &rec); err != nil {
				return err
			}
		} else {
			e, err := h.client.Enqueue(wctx, spec)
			if err != nil {
				return err
			}
			enq = ms(time.Since(t0))
			r, err := h.client.Wait(wctx, e.Queue, e.TaskID)
			if err != nil {
				return err
			}
			rec = *r
		}
		total := ms(time.Since(t0))
		if rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK {
			return fmt.Errorf("task %s: state %s verdict %s: %s\n%s", rec.TaskID, rec.State, rec.Verdict, rec.Error, srv.logs.String())
		}
		if i < 0 {
			return nil // warm-up
		}
		if viaHTTP {
			last = rec.TaskID // the token's own: runs:read reads no other's
			httpRun, httpEnq = append(httpRun, total), append(httpEnq, enq)
		} else {
			goRun, goEnq = append(goRun, total), append(goEnq, enq)
		}
		return nil
	}
	for i := range latencyWarmup {
		if err := errors.Join(run(-1-i, true), run(-1-i, false)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	for i := range h.sz.Latency {
		for k, viaHTTP := range []bool{i%2 == round%2, i%2 != round%2} {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(15*time.Millisecond + rand.N(10*time.Millisecond)):
			}
			if err := run(2*i+k, viaHTTP); err != nil {
				return err
			}
		}
	}
	for _, xs := range [][]float64{httpRun, goRun, httpEnq, goEnq} {
		slices.Sort(xs)
	}
	reads, read50, err := api.readRate(ctx, "/v1/runs/"+last)
	if err != nil {
		return err
	}
	readsQ, readQ50, err := api.readRate(ctx, "/v1/runs/"+last+"?queue="+q)
	if err != nil {
		return err
	}
	if n, err := h.rdb.SCard(ctx, asynqkey.Queues).Result(); err == nil {
		acc.queues = int(n)
	}
	acc.http50, acc.http99 = append(acc.http50, percentile(httpRun, 50)), append(acc.http99, percentile(httpRun, 99))
	acc.go50, acc.go99 = append(acc.go50, percentile(goRun, 50)), append(acc.go99, percentile(goRun, 99))
	acc.over = append(acc.over, percentile(httpRun, 50)-percentile(goRun, 50))
	acc.eh50, acc.eg50 = append(acc.eh50, percentile(httpEnq, 50)), append(acc.eg50, percentile(goEnq, 50))
	acc.reads, acc.read50 = append(acc.reads, reads), append(acc.read50, read50)
	acc.readsQ, acc.readQ50 = append(acc.readsQ, readsQ), append(acc.readQ50, readQ50)
	h.logf("  api        : enqueue → record p50 HTTP %.2f ms, Go %.2f ms (%+.2f); enqueue alone p50 HTTP %.2f, Go %.2f ms; GET /v1/runs/{id} %.0f/s (p50 %.2f ms), with ?queue= %.0f/s (%d readers)",
		percentile(httpRun, 50), percentile(goRun, 50), percentile(httpRun, 50)-percentile(goRun, 50),
		percentile(httpEnq, 50), percentile(goEnq, 50), reads, read50, readsQ, apiReaders)
	return srv.stop()
}

// readRate reads the record of a finished task with GET path from
// apiReaders connections for apiReadFor, and returns the answers per
// second and the p50 of one, in ms.
func (p *apiProc) readRate(ctx context.Context, path string) (perSec, p50 float64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var n atomic.Int64
	var mu sync.Mutex
	var lat []float64
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(apiReadFor)
	for range apiReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for time.Now().Before(stop) && ctx.Err() == nil {
				t0 := time.Now()
				if err := p.call(ctx, http.MethodGet, path, "", http.StatusOK, nil); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
					return
				}
				mine = append(mine, ms(time.Since(t0)))
				n.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	slices.Sort(lat)
	return float64(n.Load()) / elapsed.Seconds(), percentile(lat, 50), nil
}

func (a *apiAcc) report(runs int) *APIReport {
	r := &APIReport{Runs: runs, Readers: apiReaders, Queues: a.queues,
		HTTPP50: newStat(a.http50), HTTPP99: newStat(a.http99), GoP50: newStat(a.go50), GoP99: newStat(a.go99),
		OverheadP50: newStat(a.over), EnqueueHTTPP50: newStat(a.eh50), EnqueueGoP50: newStat(a.eg50),
		ReadsPerSec: newStat(a.reads), ReadP50: newStat(a.read50), ReadsQueuePerSec: newStat(a.readsQ), ReadQueueP50: newStat(a.readQ50),
		OverheadTargetMS: TargetAPIOverheadMS, ReadsTarget: TargetAPIReadsPerSec}
	r.OverheadMet = r.OverheadP50.Median <= r.OverheadTargetMS
	r.ReadsMet = r.ReadsPerSec.Median >= r.ReadsTarget
	return r
}

// apiTable formats the api section.
func apiTable(r *APIReport) string {
	var b strings.Builder
	met := map[bool]string{true: "met", false: "MISSED"}
	fmt.Fprintf(&b, "\nHTTP API over the Go client: the api binary on 127.0.0.1 in front of an idle worker (concurrency %d); %d trivial runs per path and round, the paths taking turns\n",
		latencyConcurrency, r.Runs)
	t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "figure\tHTTP API\tGo client\tHTTP − Go\ttarget (issue 25)\t")
	fmt.Fprintf(t, "enqueue → record p50, ms\t%s\t%s\t%s\t≤ %.0f ms: %s\t\n", span(r.HTTPP50), span(r.GoP50), span(r.OverheadP50), r.OverheadTargetMS, met[r.OverheadMet])
	fmt.Fprintf(t, "enqueue → record p99, ms\t%s\t%s\t\t\t\n", span(r.HTTPP99), span(r.GoP99))
	fmt.Fprintf(t, "  the enqueue alone p50, ms\t%s\t%s\t\t\t\n", span(r.EnqueueHTTPP50), span(r.EnqueueGoP50))
	t.Flush()
	fmt.Fprintf(&b, "  HTTP: POST /v1/runs, then GET /v1/runs/{id}?queue=Q&wait=1m&until=done (as the example clients); Go: Client.Enqueue, then Client.Wait\n")
	fmt.Fprintf(&b, "GET /v1/runs/{id} of a finished run, %d kept-alive connections for %s each: %s per s (≥ %.0f: %s), one p50 %s ms (no ?queue=: looked for in the %d queues in Redis)\n",
		r.Readers, apiReadFor, span(r.ReadsPerSec), r.ReadsTarget, met[r.ReadsMet], span(r.ReadP50), r.Queues)
	fmt.Fprintf(&b, "  with ?queue=: %s per s, one p50 %s ms\n", span(r.ReadsQueuePerSec), span(r.ReadQueueP50))
	return b.String()
}
