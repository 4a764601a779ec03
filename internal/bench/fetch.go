//go:build linux

package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// SecFetch measures the download of an input by the worker (address
// guard, streamed into the tmpfs workspace, hashed on the way) against a
// plain loopback download of the same file by net/http into a tmpfs file,
// and the worker's resident memory across the downloads.
const SecFetch = "fetch"

// DefaultFetchBytes is the size of the file the fetch section downloads.
const DefaultFetchBytes = 100 << 20

// FetchRow is the fetch section's result.
type FetchRow struct {
	Bytes     int64 `json:"bytes"`
	Downloads int   `json:"downloads_per_round"`
	// PlainMBps and AirlockMBps are MB/s (10^6 bytes): the plain download's
	// wall time, and the worker's own measure of its input (the record's
	// duration_ms: connect to the last byte hashed and written).
	PlainMBps   Stat `json:"plain_mb_per_s"`
	AirlockMBps Stat `json:"airlock_mb_per_s"`
	Ratio       Stat `json:"airlock_over_plain"` // per round, of the medians
	// TaskMS is the Airlock task end to end: enqueue to the record.
	TaskMS Stat `json:"airlock_task_ms"`
	// The worker's VmRSS before the first download (after a warm-up task)
	// and after the last, and its VmHWM at the end, KiB.
	WorkerRSSBeforeKB int64  `json:"worker_rss_before_kb"`
	WorkerRSSAfterKB  int64  `json:"worker_rss_after_kb"`
	WorkerHWMKB       int64  `json:"worker_hwm_kb"`
	PlainDest         string `json:"plain_destination"`
}

// fetchServer serves size pseudo-random bytes at /blob from this process.
type fetchServer struct {
	srv    *http.Server
	url    string
	size   int64
	sha256 string
}

func startFetchServer(size int64) (*fetchServer, error) {
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(data); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			data[i+k] = byte(v >> (8 * k))
		}
	}
	sum := sha256.Sum256(data)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.Write(data)
	})
	fs := &fetchServer{srv: &http.Server{Handler: mux}, url: "http://" + ln.Addr().String() + "/blob", size: size, sha256: hex.EncodeToString(sum[:])}
	go fs.srv.Serve(ln)
	return fs, nil
}

// plainDownload GETs url into a new file of dir and returns MB/s.
func plainDownload(ctx context.Context, url, dir string) (float64, int64, error) {
	f, err := os.CreateTemp(dir, "plain-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	// A client of its own each time, as the worker dials afresh per input.
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(f, resp.Body)
	if err != nil {
		return 0, 0, err
	}
	el := time.Since(start)
	return float64(n) / 1e6 / el.Seconds(), n, nil
}

// fetch runs the fetch section: per round, downloads plain and by the
// worker alternately.
func (h *harness) fetch(ctx context.Context) (*FetchRow, error) {
	size := h.opt.FetchBytes
	if size <= 0 {
		size = DefaultFetchBytes
	}
	fs, err := startFetchServer(size)
	if err != nil {
		return nil, err
	}
	defer fs.srv.Close()
	// The plain download writes into a tmpfs too, as the worker does.
	dest := "/dev/shm"
	if st, err := os.Stat(dest); err != nil || !st.IsDir() {
		dest = h.tmp
	}
	q := h.queue("fetch")
	srv, root, err := h.startServer(ctx, systemAirlock, 1, q, "-fetch-allow", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	defer h.forget(srv, root)
	wsMiB := size>>20 + 16
	spec := func(input bool) *tasks.Spec {
		js := fmt.Sprintf(`{"version": 1, "queue": %q, "limits": {"workspace": "%dMiB"}, "steps": [{"run": ["true"]}]}`, q, wsMiB)
		if input {
			js = fmt.Sprintf(`{"version": 1, "queue": %q, "limits": {"workspace": "%dMiB"},
				"inputs": [{"url": %q, "path": "in/blob", "max_bytes": "%dMiB", "sha256": %q}], "steps": [{"run": ["true"]}]}`,
				q, wsMiB, fs.url, wsMiB, fs.sha256)
		}
		s, err := tasks.Decode([]byte(js))
		if err != nil {
			panic(err) // built above
		}
		return s
	}
	runOne := func(input bool) (*record.Run, time.Duration, error) {
		start := time.Now()
		e, err := h.client.Enqueue(ctx, spec(input))
		if err != nil {
			return nil, 0, err
		}
		rec, err := h.client.Wait(ctx, q, e.TaskID)
		if err != nil {
			return nil, 0, err
		}
		if rec.State != record.StateCompleted {
			return nil, 0, fmt.Errorf("task %s: %s %s: %s", rec.TaskID, rec.State, rec.Verdict, rec.Error)
		}
		return rec, time.Since(start), nil
	}
	if _, _, err := runOne(false); err != nil { // warm-up: a slot, a helper
		return nil, err
	}
	row := &FetchRow{Bytes: size, Downloads: 3, PlainDest: dest}
	row.WorkerRSSBeforeKB, _, err = srv.rss()
	if err != nil {
		return nil, err
	}
	var plain, air, ratio, taskMS []float64
	for r := 0; r < h.opt.Rounds; r++ {
		var p, a []float64
		for i := 0; i < row.Downloads; i++ {
			order := []bool{false, true}
			if (r+i)%2 == 1 {
				order = []bool{true, false}
			}
			for _, byWorker := range order {
				if !byWorker {
					mbps, n, err := plainDownload(ctx, fs.url, dest)
					if err != nil {
						return nil, fmt.Errorf("plain download: %w", err)
					}
					if n != size {
						return nil, fmt.Errorf("plain download: %d bytes, want %d", n, size)
					}
					p = append(p, mbps)
					continue
				}
				rec, el, err := runOne(true)
				if err != nil {
					return nil, err
				}
				in := rec.Inputs[0]
				if in.Bytes != size || in.SHA256 != fs.sha256 {
					return nil, fmt.Errorf("worker download: %d bytes sha256 %s, want %d %s", in.Bytes, in.SHA256, size, fs.sha256)
				}
				a = append(a, float64(in.Bytes)/1e6/(in.DurationMS/1000))
				taskMS = append(taskMS, float64(el.Microseconds())/1000)
			}
		}
		plain, air = append(plain, p...), append(air, a...)
		ratio = append(ratio, newStat(a).Median/newStat(p).Median)
		h.logf("  fetch round %d: plain %.0f MB/s, airlock %.0f MB/s (median of %d)", r+1, newStat(p).Median, newStat(a).Median, row.Downloads)
	}
	row.PlainMBps, row.AirlockMBps, row.Ratio, row.TaskMS = newStat(plain), newStat(air), newStat(ratio), newStat(taskMS)
	row.WorkerRSSAfterKB, row.WorkerHWMKB, err = srv.rss()
	if err != nil {
		return nil, err
	}
	if err := srv.stop(); err != nil {
		return nil, err
	}
	return row, nil
}

// fetchTable formats the fetch row.
func fetchTable(r *FetchRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nInput download, %d MiB from a server on 127.0.0.1 (%d per system and round, alternating; MB/s = 10^6 bytes/s)\n", r.Bytes>>20, r.Downloads)
	fmt.Fprintf(&b, "plain: net/http GET + io.Copy into %s; airlock: the worker's fetch (address guard, streamed into the tmpfs workspace, sha256 on the way), its record's duration\n", r.PlainDest)
	fmt.Fprintf(&b, "%-22s  %s\n", "plain MB/s", span(r.PlainMBps))
	fmt.Fprintf(&b, "%-22s  %s\n", "airlock MB/s", span(r.AirlockMBps))
	fmt.Fprintf(&b, "%-22s  %s\n", "airlock/plain", span(r.Ratio))
	fmt.Fprintf(&b, "%-22s  %s\n", "airlock task ms", span(r.TaskMS))
	fmt.Fprintf(&b, "%-22s  %.1f MiB before, %.1f MiB after, VmHWM %.1f MiB\n", "worker RSS", mib(r.WorkerRSSBeforeKB), mib(r.WorkerRSSAfterKB), mib(r.WorkerHWMKB))
	return b.String()
}
