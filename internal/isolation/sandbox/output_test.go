//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
)

// feed returns the read end of a pipe that gets data, then EOF.
func feed(t *testing.T, data []byte) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = w.Write(data); w.Close() }()
	return r
}

var texts = map[string]string{
	"french":   "Le cœur déçu mais l'âme plutôt naïve, Louÿs rêva de crapaüter en canoë au delà des îles, près du mälström où brûlent les novæ.",
	"japanese": "いろはにほへと ちりぬるを わかよたれそ つねならむ うゐのおくやま けふこえて あさきゆめみし ゑひもせす",
	"emoji":    "ok 🙂 done 👍🏽 ✓",
}

// TestCaptureCutsOnACharacter: text cut at its cap at every offset stays
// text: what is kept is the longest prefix that ends on a character, the
// record says the stream was cut and counts every byte.
func TestCaptureCutsOnACharacter(t *testing.T) {
	for name, text := range texts {
		var before, after, cuts int
		for n := 1; n < len(text); n++ {
			cuts++
			if !utf8.ValidString(text[:n]) {
				before++ // what the record used to keep: base64
			}
			c := capture(feed(t, []byte(text)), int64(n), nil, nil, nil)
			if !c.Truncated || c.Total != int64(len(text)) {
				t.Fatalf("%s cut at %d: truncated %v, total %d, want true, %d", name, n, c.Truncated, c.Total, len(text))
			}
			if !strings.HasPrefix(text, string(c.Data)) || n-len(c.Data) >= utf8.UTFMax || len(c.Data) > n {
				t.Fatalf("%s cut at %d: kept %q", name, n, c.Data)
			}
			if _, enc := record.Text(c.Data); enc != "" {
				after++
			}
			// No character boundary is lost: a longer prefix within the
			// cap would not be valid.
			for m := len(c.Data) + 1; m <= n; m++ {
				if utf8.ValidString(text[:m]) {
					t.Fatalf("%s cut at %d: kept %d bytes, but the first %d are whole characters", name, n, len(c.Data), m)
				}
			}
		}
		t.Logf("%s: %d cuts, base64 before: %d, after: %d", name, cuts, before, after)
		if after != 0 {
			t.Errorf("%s: %d of %d cuts still turn the stream into base64", name, after, cuts)
		}
		if before == 0 {
			t.Errorf("%s: no cut would have been base64: the test text does not show the bug", name)
		}
	}
}

// TestCaptureKeepsBinaryWhole: bytes that are not text anyway are kept
// as they came, up to the cap, even when they end in what looks like the
// start of a character; and a stream that was not cut keeps its last
// bytes, complete or not.
func TestCaptureKeepsBinaryWhole(t *testing.T) {
	bin := []byte{0xff, 'a', 'b', 0xe3, 0x81, 0x82, 0xe3, 0x81}
	if c := capture(feed(t, bin), 7, nil, nil, nil); len(c.Data) != 7 || !c.Truncated {
		t.Errorf("binary cut at 7: kept %x, truncated %v", c.Data, c.Truncated)
	}
	half := []byte("abc\xe3\x81")
	if c := capture(feed(t, half), 64, nil, nil, nil); !bytes.Equal(c.Data, half) || c.Truncated {
		t.Errorf("whole stream ending mid-character: kept %x, truncated %v", c.Data, c.Truncated)
	}
}

// TestKeepBudget: two streams keep no more than the budget between them
// and count all; each stream's cap still applies; the budget is shared
// across captures (steps) and safe for concurrent use; a budget that
// runs out in a character keeps the text before it, and stays spent.
func TestKeepBudget(t *testing.T) {
	b := NewKeepBudget(100 << 10)
	data := bytes.Repeat([]byte("x"), 1<<20)
	var out, errc Capture
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); out = capture(feed(t, data), 4<<20, b, nil, nil) }()
	go func() { defer wg.Done(); errc = capture(feed(t, data), 4<<20, b, nil, nil) }()
	wg.Wait()
	if kept := len(out.Data) + len(errc.Data); kept != 100<<10 || b.Left() != 0 {
		t.Errorf("kept %d bytes of a 100 KiB budget, %d left", kept, b.Left())
	}
	if out.Total != 1<<20 || errc.Total != 1<<20 || !out.Truncated || !errc.Truncated {
		t.Errorf("counted %d and %d, truncated %v %v", out.Total, errc.Total, out.Truncated, errc.Truncated)
	}
	for _, c := range []Capture{out, errc} {
		if int64(cap(c.Data)) > 100<<10 {
			t.Errorf("a capture holds %d bytes to keep %d", cap(c.Data), len(c.Data))
		}
	}
	if c := capture(feed(t, data), 4<<20, b, nil, nil); len(c.Data) != 0 || c.Total != 1<<20 || !c.Truncated {
		t.Errorf("after the budget: kept %d, counted %d", len(c.Data), c.Total)
	}

	b = NewKeepBudget(10)
	c := capture(feed(t, []byte("ab")), 1, b, nil, nil)
	if string(c.Data) != "a" || b.Left() != 9 {
		t.Errorf("the stream's cap: kept %q, budget left %d", c.Data, b.Left())
	}
	c = capture(feed(t, []byte("abcdefgh\xc3\xa9")), 64, b, nil, nil) // the budget cuts é
	if string(c.Data) != "abcdefgh" || b.Left() != 0 || !c.Truncated || c.Total != 10 {
		t.Errorf("budget cut in a character: kept %q, left %d, %+v", c.Data, b.Left(), c)
	}
	if NewKeepBudget(-5).Left() != 0 {
		t.Error("a negative budget keeps something")
	}
}

// TestCaptureMemoryIsWhatItKeeps: a capture's buffer never outgrows its
// cap, whatever the step writes.
func TestCaptureMemoryIsWhatItKeeps(t *testing.T) {
	for _, limit := range []int64{1, 4095, 4096, 100000, 1 << 20} {
		c := capture(feed(t, bytes.Repeat([]byte("y\n"), 1<<20)), limit, nil, nil, nil)
		if int64(len(c.Data)) != limit || int64(cap(c.Data)) != limit {
			t.Errorf("cap %d: kept %d in a buffer of %d", limit, len(c.Data), cap(c.Data))
		}
	}
}

// outputStep is a step with small limits on what it may write.
func outputStep(total, keep int64, argv ...string) Step {
	st := step(argv...)
	st.Limits.Output, st.Limits.OutputTotal = limits.Bytes(keep), limits.Bytes(total)
	return st
}

// TestOutputTotalKillsARunawayPrinter: `yes` is killed as soon as it has
// written more than limits.output_total, tree and all, with what it wrote
// first kept and its count at most one pipe buffer past the limit.
func TestOutputTotalKillsARunawayPrinter(t *testing.T) {
	s, _ := setup(t)
	const limit = 1 << 20
	for _, argv := range [][]string{
		{"yes"},
		{"sh", "-c", "trap '' TERM; yes & yes >&2 & setsid yes & wait"},
	} {
		st := outputStep(limit, 4096, argv...)
		start := time.Now()
		r, err := s.Run(context.Background(), st)
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		total := r.Stdout.Total + r.Stderr.Total
		t.Logf("%q: ended in %s, %d bytes (%d past the limit), %+v", argv, took.Round(time.Millisecond), total, total-limit, r.Signal)
		if !r.OutputLimit || r.Canceled || r.TimedOut || took > 5*time.Second {
			t.Errorf("%q: output limit %v, canceled %v, timed out %v after %s", argv, r.OutputLimit, r.Canceled, r.TimedOut, took)
		}
		if total <= limit || total > limit+1+2*(64<<10)+(32<<10) {
			t.Errorf("%q: counted %d bytes for a limit of %d", argv, total, limit)
		}
		// Each stream keeps the first 4 KiB it got (with three printers
		// racing, stderr's may have taken the whole limit before stdout's
		// first write), and at least one reached its cap.
		full := false
		for _, c := range []Capture{r.Stdout, r.Stderr} {
			want := min(c.Total, 4096)
			if int64(len(c.Data)) != want || strings.Trim(string(c.Data), "y\n") != "" || c.Truncated != (c.Total > 4096) {
				t.Errorf("%q: kept %d bytes of %d (truncated %v) %q...", argv, len(c.Data), c.Total, c.Truncated, c.Data[:min(8, len(c.Data))])
			}
			full = full || len(c.Data) == 4096
		}
		if !full || !strings.HasPrefix(string(r.Stdout.Data)+string(r.Stderr.Data), "y\ny\n") {
			t.Errorf("%q: kept %q and %q", argv, r.Stdout.Data[:min(8, len(r.Stdout.Data))], r.Stderr.Data[:min(8, len(r.Stderr.Data))])
		}
	}
	// The slot is good for the next step, which is not killed.
	r, err := s.Run(context.Background(), outputStep(limit, 4096, "echo", "next"))
	if err != nil || r.OutputLimit || string(r.Stdout.Data) != "next\n" {
		t.Fatalf("next step: %+v, %v", r, err)
	}
}

// TestOutputTotalBoundary: writing exactly the limit, stdout and stderr
// together, is fine; one byte more is not; what goes to files or
// /dev/null does not count; a limit of one byte kills a step that writes
// at once.
func TestOutputTotalBoundary(t *testing.T) {
	s, _ := setup(t)
	const limit = 200000
	for _, tc := range []struct {
		script string
		over   bool
	}{
		{"head -c 200000 /dev/zero", false},
		{"head -c 150000 /dev/zero; head -c 50000 /dev/zero >&2", false},
		{"head -c 200001 /dev/zero", true},
		{"head -c 150000 /dev/zero >&2; head -c 50001 /dev/zero", true},
		{"head -c 50000000 /dev/zero > /dev/null; head -c 8000000 /dev/zero > big; echo done", false},
	} {
		r, err := s.Run(context.Background(), outputStep(limit, 64, "sh", "-c", tc.script))
		if err != nil {
			t.Fatal(err)
		}
		if r.OutputLimit != tc.over || (!tc.over && (!r.Exited || r.ExitCode != 0)) {
			t.Errorf("%s: output limit %v, want %v: %+v", tc.script, r.OutputLimit, tc.over, r)
		}
		if !tc.over && r.Stdout.Total+r.Stderr.Total > limit {
			t.Errorf("%s: counted %d", tc.script, r.Stdout.Total+r.Stderr.Total)
		}
	}
	r, err := s.Run(context.Background(), outputStep(1, 64, "sh", "-c", "echo hi; sleep 30"))
	if err != nil || !r.OutputLimit || r.Duration > 5*time.Second {
		t.Errorf("limit of one byte: %+v, %v", r, err)
	}
}
