//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// runSampled runs a spec and samples the worker's procStats every 20 ms
// while it runs: it returns the record and the largest figures seen.
func (b *bundle) runSampled(js string) (*record.Run, procStats) {
	b.t.Helper()
	e, err := b.client.Enqueue(context.Background(), b.spec(js))
	if err != nil {
		b.t.Fatalf("enqueue: %v", err)
	}
	type result struct {
		rec *record.Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rec, err := b.client.Wait(ctx, b.queue, e.TaskID)
		done <- result{rec, err}
	}()
	var peak procStats
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for {
		s := b.workerStats()
		peak.HWM, peak.RSS, peak.FDs = max(peak.HWM, s.HWM), max(peak.RSS, s.RSS), max(peak.FDs, s.FDs)
		select {
		case r := <-done:
			if r.err != nil {
				b.t.Fatalf("wait: %v\nworker logs:\n%s", r.err, b.worker.logs.String())
			}
			return r.rec, peak
		case <-tk.C:
		}
	}
}

// refusedOf sums the record's aggregate entries (no destination) whose
// reason has s.
func refusedOf(rec *record.Run, s string) (n int, up int64) {
	for _, e := range rec.Egress {
		if e.Host == "" && strings.Contains(e.Reason, s) {
			n += e.Count
			up += e.BytesUp
		}
	}
	return n, up
}

// egressSetup starts a networked worker with a plain HTTP server it may
// reach, warmed up by one regular request through the proxy (the
// networked helper started, the proxy's code paths run once), its peak
// reset after.
func egressSetup(t *testing.T, flags ...string) (*bundle, string) {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "head", "tr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s in the steps' view", tool)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "regular\n") }))
	t.Cleanup(srv.Close)
	b := setup(t, append([]string{"-allow-network", "-egress-allow", "127.0.0.1"}, flags...)...)
	rec := b.run(fmt.Sprintf(`{"version": 1, "network": true, "steps": [{"run": ["curl", "-sS", %q]}]}`, srv.URL))
	if got := stepOf(t, rec, 0).Stdout; got != "regular\n" {
		t.Fatalf("warm-up request through the proxy: %q\n%s", got, mustJSON(t, rec))
	}
	return b, srv.URL
}

// TestExhaustEgressHead: endless request heads (64 MiB each, 8 at once
// then 16 in a row) sent to the proxy are each read to 64 KiB, refused
// with 431 and listed; their bytes count against -egress-max-bytes, which
// then refuses what follows; the worker grows under 50 MiB. So do heads
// of many short lines, refused at 256 lines.
func TestExhaustEgressHead(t *testing.T) {
	t.Parallel()
	b, srvURL := egressSetup(t, "-egress-max-bytes", "1MiB")
	script := `
head64() ( # one connection, a 64 MiB request head, the reply's status line
  trap '' PIPE
  exec 3<>/dev/tcp/127.0.0.1/3128 || { echo "$1=noconn"; exit; }
  { printf 'GET http://127.0.0.1/ HTTP/1.1\r\nX-Long: '; head -c 64M /dev/zero | tr '\0' a; } >&3 2>/dev/null
  IFS= read -r -t 5 line <&3; echo "$1=${line%$'\r'}"
)
for i in 1 2 3 4 5 6 7 8; do head64 par$i & done; wait
for i in $(seq 1 16); do head64 seq$i; done
curl -sS -o /dev/null -w 'regular=%{http_code}\n' ` + srvURL + `/
`
	before := b.workerStats()
	b.resetPeak()
	rec, peak := b.runSampled(fmt.Sprintf(`{"version": 1, "network": true, "timeout": "60s", "files": {"h.sh": %q}, "steps": [{"run": ["bash", "h.sh"]}]}`, script))
	after := b.workerStats()
	t.Logf("worker before: %s; peak while running: %s; after: %s", before, peak, after)
	out := stepOf(t, rec, 0).Stdout
	t.Logf("step's stdout:\n%s", out)
	if grew := max(peak.HWM, after.HWM) - before.RSS; grew > 50<<20 {
		t.Errorf("the worker grew by %d MiB (VmHWM %d MiB from VmRSS %d MiB), want under 50 MiB", grew>>20, after.HWM>>20, before.RSS>>20)
	}
	n, up := refusedOf(rec, "request head over 64 KiB")
	if n < 8 || up > int64(n)*64<<10 {
		t.Errorf("%d heads refused as over 64 KiB, %d bytes up; want at least the 8 sent at once, at most 64 KiB each:\n%s", n, up, mustJSON(t, rec.Egress))
	}
	// 24 heads of 64 KiB pass a 1 MiB cap: the rest is refused at it.
	capped, _ := refusedOf(rec, "egress cap")
	if n+capped != 24+1 || capped < 2 {
		t.Errorf("%d refused as too large, %d at the egress cap; want 25 in all (the regular request last), the cap reached:\n%s", n, capped, mustJSON(t, rec.Egress))
	}
	if !strings.Contains(out, "=HTTP/1.1 431") {
		t.Errorf("no connection read the 431:\n%s", out)
	}
	// Refused at once, its request unread: the 403 may be lost to the
	// connection's reset (000); the record says which it was.
	if !strings.Contains(out, "regular=403") && !strings.Contains(out, "regular=000") {
		t.Errorf("the regular request past the cap was not refused:\n%s", out)
	}

	// Heads under 64 KiB, of 15,000 lines each, held open 64 at once:
	// parsed, each would be a map of 15,000 headers (about 1 MiB); each
	// is refused at its 257th line.
	script = `
{ printf 'CONNECT 127.0.0.1:9 HTTP/1.1\r\n'; for i in $(seq 1 15000); do printf 'a:\n'; done; } > lines.txt
fds=()
for i in $(seq 1 64); do exec {fd}<>/dev/tcp/127.0.0.1/3128 && fds+=($fd) && cat lines.txt >&$fd 2>/dev/null; done
echo sent=${#fds[@]} bytes=$(wc -c < lines.txt)
`
	before = b.workerStats()
	b.resetPeak()
	rec, peak = b.runSampled(fmt.Sprintf(`{"version": 1, "network": true, "timeout": "60s", "limits": {"open_files": 1024}, "files": {"l.sh": %q}, "steps": [{"run": ["bash", "l.sh"]}]}`, script))
	after = b.workerStats()
	t.Logf("lines: worker before: %s; peak while running: %s; after: %s; stdout %q", before, peak, after, stepOf(t, rec, 0).Stdout)
	if grew := max(peak.HWM, after.HWM) - before.RSS; grew > 50<<20 {
		t.Errorf("the worker grew by %d MiB, want under 50 MiB", grew>>20)
	}
	if n, _ := refusedOf(rec, "request head over 256 lines"); n != 64 {
		t.Errorf("%d heads refused past 256 lines, want 64:\n%s", n, mustJSON(t, rec.Egress))
	}
}

// TestExhaustEgressIdleConns: a step opens 400 connections to the proxy
// and sends nothing. The worker holds at most -egress-max-conns (64) of
// them, refuses the rest at once, frees the 64 at the request head's
// timeout, and stays under 200 descriptors during and after; the record
// accounts for all 400 in two entries; a regular request then goes
// through.
func TestExhaustEgressIdleConns(t *testing.T) {
	t.Parallel()
	const conns = 400
	b, srvURL := egressSetup(t, "-egress-idle-timeout", "3s")
	script := fmt.Sprintf(`
fds=()
for i in $(seq 1 %d); do exec {fd}<>/dev/tcp/127.0.0.1/3128 && fds+=($fd); done
echo opened=${#fds[@]}
sleep 5
for fd in "${fds[@]}"; do exec {fd}<&-; done
curl -sS -o /dev/null -w 'regular=%%{http_code}\n' %s/
`, conns, srvURL)
	before := b.workerStats()
	b.resetPeak()
	rec, peak := b.runSampled(fmt.Sprintf(`{"version": 1, "network": true, "timeout": "60s", "limits": {"open_files": 1024}, "files": {"c.sh": %q}, "steps": [{"run": ["bash", "c.sh"]}]}`, script))
	// The worker's own Redis pool may grow by a few connections while
	// the run is reported; a leak of the held connections is 64.
	var after procStats
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if after = b.workerStats(); after.FDs <= before.FDs+16 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("worker before: %s; peak while running: %s; after: %s", before, peak, after)
	out := stepOf(t, rec, 0).Stdout
	if !strings.Contains(out, fmt.Sprintf("opened=%d", conns)) || !strings.Contains(out, "regular=200") {
		t.Errorf("stdout %q: want %d connections opened, then a regular request served", out, conns)
	}
	if peak.FDs >= 200 || after.FDs >= 200 {
		t.Errorf("worker descriptors: %d at most while running, %d after; want under 200", peak.FDs, after.FDs)
	}
	if after.FDs > before.FDs+16 {
		t.Errorf("worker descriptors: %d before, %d after: not released", before.FDs, after.FDs)
	}
	if grew := max(peak.HWM, after.HWM) - before.RSS; grew > 50<<20 {
		t.Errorf("the worker grew by %d MiB, want under 50 MiB", grew>>20)
	}
	over, _ := refusedOf(rec, "-egress-max-conns")
	late, _ := refusedOf(rec, "no complete request head within 3s")
	if over < conns-64 || over+late != conns || len(rec.Egress) > 3 {
		t.Errorf("%d refused past the cap, %d at the head's timeout; want %d in all, at least %d past the cap, in a short list:\n%s", over, late, conns, conns-64, mustJSON(t, rec.Egress))
	}
}
