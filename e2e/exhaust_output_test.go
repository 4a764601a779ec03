//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/record"
)

// TestOutputLimitStopsARunawayPrinter: `yes` used to run to its deadline
// (30 s of CPU, 60 s of wall time by default). Past limits.output_total
// (default 16 MiB, stdout and stderr together) the worker kills its tree
// at once: the step's verdict is output_limit, what is kept is still the
// first limits.output bytes, and the count stops within a pipe buffer of
// the limit. The worker holds none of it.
func TestOutputLimitStopsARunawayPrinter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.resetPeak()
	before := b.workerStats()
	start := time.Now()
	rec := b.run(`{"version": 1, "steps": [{"run": ["yes"]}]}`)
	took := time.Since(start)
	after := b.workerStats()
	st := stepOf(t, rec, 0)
	t.Logf("yes: %s to its record, the step %.0f ms; %d bytes counted; worker %s before, %s after", took.Round(time.Millisecond), st.DurationMS, st.StdoutBytes, before, after)
	if st.Verdict != record.VerdictOutputLimit || rec.Verdict != record.VerdictOutputLimit || rec.State != record.StateFailed {
		t.Fatalf("want output_limit:\n%s", mustJSON(t, rec))
	}
	if st.DurationMS > 5000 || took > 10*time.Second {
		t.Errorf("the step took %.0f ms (%s to its record), want under 5 s", st.DurationMS, took)
	}
	const limit = 16 << 20
	if st.StdoutBytes <= limit || st.StdoutBytes > limit+1+64<<10 {
		t.Errorf("stdout_bytes %d, want just past %d (at most one pipe buffer)", st.StdoutBytes, limit)
	}
	if len(st.Stdout) != 64<<10 || st.Stdout != strings.Repeat("y\n", 32<<10) || !st.StdoutTruncated || st.StdoutEncoding != "" {
		t.Errorf("kept %d bytes (encoding %q, truncated %v), want the first 64 KiB of yes", len(st.Stdout), st.StdoutEncoding, st.StdoutTruncated)
	}
	if grew := after.HWM - before.RSS; grew > 50<<20 {
		t.Errorf("the worker's peak grew by %d MiB", grew>>20)
	}
	// The same printer writing elsewhere than its stdout and stderr is not
	// limited; nor is a step that writes exactly the limit.
	rec = b.run(`{"version": 1, "steps": [
		{"run": ["sh", "-c", "yes | head -c 100000000 > /dev/null; yes | head -c 30000000 > big.txt; wc -c < big.txt"]},
		{"run": ["sh", "-c", "head -c 12582912 /dev/zero; head -c 4194304 /dev/zero >&2"]}]}`)
	if rec.Verdict != record.VerdictOK || stepOf(t, rec, 0).Stdout != "30000000\n" {
		t.Fatalf("want ok:\n%s", mustJSON(t, rec))
	}
	if st := stepOf(t, rec, 1); st.StdoutBytes+st.StderrBytes != limit {
		t.Errorf("the step writing the limit counted %d bytes", st.StdoutBytes+st.StderrBytes)
	}
}

// TestOutputLimitPolicy: an operator lowers the default (-limits) and the
// maximum (-max-limits); a spec may lower it further, never raise it past
// the maximum, and is told which field.
func TestOutputLimitPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, "-limits", "output_total=1MiB", "-max-limits", "output_total=4MiB")
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "yes >&2"]}]}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictOutputLimit || st.StderrBytes <= 1<<20 || st.StderrBytes > 1<<20+1+64<<10 {
		t.Fatalf("want output_limit just past 1 MiB of stderr:\n%s", mustJSON(t, rec))
	}
	rec = b.run(`{"version": 1, "limits": {"output_total": 1000}, "steps": [{"run": ["sh", "-c", "head -c 1000 /dev/zero; echo more >&2; sleep 30"]}]}`)
	if st := stepOf(t, rec, 0); st.Verdict != record.VerdictOutputLimit || st.DurationMS > 5000 {
		t.Fatalf("a spec's lower limit: want output_limit at once:\n%s", mustJSON(t, rec))
	}
	_, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "limits": {"output_total": "8MiB"}, "steps": [{"run": ["true"]}]}`))
	if err == nil || !strings.Contains(err.Error(), "limits.output_total") {
		t.Fatalf("a spec above the maximum: %v, want a rejection naming limits.output_total", err)
	}
	rec = b.runRaw(`{"version": 1, "limits": {"output_total": "8MiB"}, "steps": [{"run": ["true"]}]}`)
	if rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, "limits.output_total") || len(rec.Steps) != 0 {
		t.Fatalf("the worker rechecks: want a rejection naming limits.output_total:\n%s", mustJSON(t, rec))
	}
}

// TestOutputCutStaysText: text cut at limits.output in the middle of a
// character used to turn the whole kept stream into base64 (2 cuts in 3
// for Japanese text); what is kept now ends at the last whole character,
// and the record still says the stream was cut and counts every byte.
func TestOutputCutStaysText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	texts := []string{
		"いろはにほへと ちりぬるを わかよたれそ つねならむ",
		"Le cœur déçu mais l'âme plutôt naïve, Louÿs rêva de crapaüter en canoë",
	}
	for i, text := range texts {
		for cut := 30; cut < 36; cut++ {
			rec := b.run(fmt.Sprintf(`{"version": 1, "files": {"t.txt": %q}, "limits": {"output": %d},
				"steps": [{"run": ["sh", "-c", "cat t.txt; cat t.txt >&2"]}]}`, text, cut))
			st := stepOf(t, rec, 0)
			for _, s := range []struct {
				kept, enc string
				n         int64
				cut       bool
			}{{st.Stdout, st.StdoutEncoding, st.StdoutBytes, st.StdoutTruncated}, {st.Stderr, st.StderrEncoding, st.StderrBytes, st.StderrTruncated}} {
				if s.enc != "" || !strings.HasPrefix(text, s.kept) || cut-len(s.kept) >= utf8.UTFMax || !s.cut || s.n != int64(len(text)) {
					t.Errorf("text %d cut at %d: kept %q (encoding %q), truncated %v, %d bytes counted", i, cut, s.kept, s.enc, s.cut, s.n)
				}
			}
		}
	}
}

// TestMemoryPeakIsTheStepsOwn: memory_peak_bytes used to include the page
// cache earlier tasks left charged to the slot's cgroup: a trivial step
// reported 86 MiB after other tasks, and one using 481 MiB of a 512 MiB
// limit reported 512 MiB. On one slot (-concurrency 1), after a task that
// read 300 MiB of files, a trivial step reports a few MiB, and one that
// allocates 200 MiB about that.
func TestMemoryPeakIsTheStepsOwn(t *testing.T) {
	t.Parallel()
	dir := coldDir(t, 300, "a", "b")
	b := setup(t, "-concurrency", "1", "-ro-bind", dir+":/opt/cold")
	peak := func(js string) (int64, *record.Run) {
		t.Helper()
		rec := b.run(js)
		if rec.State != record.StateCompleted {
			t.Fatalf("want completed:\n%s", mustJSON(t, rec))
		}
		return stepOf(t, rec, 0).MemoryPeakBytes, rec
	}
	heavy, _ := peak(`{"version": 1, "steps": [{"run": ["sh", "-c", "cat /opt/cold/a > /dev/null"]}]}`)
	if heavy < 250<<20 {
		t.Fatalf("the task that read 300 MiB peaked at %d MiB: its reads were not charged to the slot, the test proves nothing", heavy>>20)
	}
	trivial, _ := peak(`{"version": 1, "steps": [{"run": ["sh", "-c", "exit 0"]}]}`)
	t.Logf("after a task that read 300 MiB (peak %d MiB): a trivial step reports %.1f MiB", heavy>>20, float64(trivial)/(1<<20))
	if trivial <= 0 || trivial > 16<<20 {
		t.Errorf("trivial step after a cache-heavy task: memory_peak_bytes %d, want (0, 16 MiB]", trivial)
	}
	heavy, _ = peak(`{"version": 1, "steps": [{"run": ["sh", "-c", "cat /opt/cold/b > /dev/null"]}]}`)
	big, rec := peak(`{"version": 1, "steps": [{"run": ["python3", "-c", "x = b'a' * (200 << 20)"]}]}`)
	t.Logf("after another (peak %d MiB): a step allocating 200 MiB reports %.1f MiB (max RSS %d MiB)", heavy>>20, float64(big)/(1<<20), stepOf(t, rec, 0).MaxRSSKB>>10)
	if big < 160<<20 || big > 240<<20 {
		t.Errorf("a step allocating 200 MiB: memory_peak_bytes %d MiB, want within 20%%", big>>20)
	}
}

// coldDir writes files of n MiB each on disk, readable by the slots'
// uids, out of the page cache: the step that reads one brings it in,
// charged to its slot's cgroup.
func coldDir(t *testing.T, n int, names ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-cold-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for _, name := range names {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return dir
}
