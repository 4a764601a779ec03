//go:build linux

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// storedRecordBytes is the size of the record the worker stored in Redis
// for taskID: the "result" field of asynq's task hash.
func (b *bundle) storedRecordBytes(taskID string) int64 {
	b.t.Helper()
	n, err := redistest.Client(b.t).HStrLen(context.Background(), "asynq:{"+b.queue+"}:t:"+taskID, "result").Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// TestRecordFlood: 8 steps each writing 4 MiB to stdout and 4 MiB to
// stderr, which limits.output allows per stream. Before the run's bound,
// the record reached 402 MB in Redis and the worker 1.4 GB; with 16 steps
// no record was ever stored. The record now keeps at most the default
// -max-record-bytes (1 MiB) of output, counts the rest, and says so.
func TestRecordFlood(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.resetPeak()
	before := b.workerStats()
	steps := make([]string, 8)
	for i := range steps {
		// Printable text with control characters, which JSON escapes to
		// six bytes each: the bound is on the record's encoding.
		steps[i] = fmt.Sprintf(`{"run": ["sh", "-c", "head -c 4194304 /dev/zero | tr '\\0' '\\001'; head -c 4194304 /dev/zero | tr '\\0' e >&2"], "name": "flood-%d"}`, i)
	}
	rec := b.run(`{"version": 1, "timeout": "120s", "limits": {"output": "4MiB", "output_total": "16MiB"}, "steps": [` + strings.Join(steps, ",") + `]}`)
	after := b.workerStats()
	if rec.State != record.StateCompleted || len(rec.Steps) != 8 {
		t.Fatalf("want completed with 8 steps: %s %s (%d steps)", rec.State, rec.Error, len(rec.Steps))
	}
	k := rec.KeptOutput
	if k == nil || k.MaxBytes != 1<<20 || k.Bytes > k.MaxBytes || !k.Reached {
		t.Fatalf("kept_output %+v: want the 1 MiB bound reached", k)
	}
	var written int64
	for _, st := range rec.Steps {
		written += st.StdoutBytes + st.StderrBytes
		if st.StdoutBytes != 4<<20 || st.StderrBytes != 4<<20 {
			t.Errorf("step %s: counted %d and %d bytes, want 4 MiB each", st.Name, st.StdoutBytes, st.StderrBytes)
		}
	}
	if k.DroppedBytes < written-k.MaxBytes {
		t.Errorf("dropped %d of %d bytes written with %d kept", k.DroppedBytes, written, k.Bytes)
	}
	last := rec.Steps[7]
	if last.Stdout != "" || !last.StdoutTruncated {
		t.Errorf("the last step's stdout was kept (%d bytes) past the bound", len(last.Stdout))
	}
	size := b.storedRecordBytes(rec.TaskID)
	grew := after.HWM - before.RSS
	t.Logf("record %d KiB in Redis; worker %s before, %s after (peak grew %d MiB)", size>>10, before, after, grew>>20)
	if size > 2<<20 {
		t.Errorf("the stored record is %d bytes, want under 2 MiB", size)
	}
	if grew > 100<<20 {
		t.Errorf("the worker's peak grew by %d MiB, want under 100 MiB", grew>>20)
	}
}

// TestRecordBoundLowered: a spec may lower the bound, never raise it.
func TestRecordBoundLowered(t *testing.T) {
	t.Parallel()
	b := setup(t, "-max-record-bytes", "64KiB")
	rec := b.run(`{"version": 1, "max_record_bytes": "100B", "steps": [{"run": ["sh", "-c", "seq 1 1000; seq 1 1000 >&2"]}]}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictOK || rec.KeptOutput == nil || rec.KeptOutput.MaxBytes != 100 ||
		int64(len(st.Stdout)+len(st.Stderr)) > 100 || !st.StdoutTruncated || !st.StderrTruncated || st.StdoutBytes != 3893 {
		t.Fatalf("a spec's bound of 100 bytes:\n%s", mustJSON(t, rec))
	}
	_, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "max_record_bytes": "1MiB", "steps": [{"run": ["true"]}]}`))
	if err == nil || !strings.Contains(err.Error(), "max_record_bytes") {
		t.Errorf("a spec above the worker's -max-record-bytes: %v, want an error naming max_record_bytes", err)
	}
	raw := b.runRaw(`{"version": 1, "max_record_bytes": "1MiB", "steps": [{"run": ["true"]}]}`)
	if raw.State != record.StateFailed || !strings.Contains(raw.Error, "max_record_bytes") {
		t.Errorf("the worker ran a spec above its bound:\n%s", mustJSON(t, raw))
	}
}

// TestPendingBytesBound: each parked run stages its output in Redis until
// a human decides. Before the bound, nothing limited their total (three
// runs took Redis from 3 MB to 104 MB). Past -max-pending-bytes a park
// fails with verdict pending_limit, nothing staged by another run is
// evicted, and a decision makes room again.
func TestPendingBytesBound(t *testing.T) {
	t.Parallel()
	prefix := "pend" + numMarker() + ":"
	b := setup(t, "-prefix", prefix, "-max-pending-bytes", "2MiB", "-max-artifact-bytes", "4MiB", "-max-staged-bytes", "4MiB")
	rdb := redistest.Client(t)
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	t.Cleanup(func() { b.client.Close() })
	store := approve.NewStore(rdb, approve.Options{Prefix: prefix})
	spec := `{"version": 1, "steps": [{"run": ["sh", "-c", "head -c 900000 /dev/zero | tr '\\0' x > out/big.txt"]}],
		"output": {"artifacts": ["out/big.txt"]}}`
	var parked []string
	for i := range 2 {
		rec := b.run(spec)
		if rec.State != record.StateParked {
			t.Fatalf("run %d: want parked:\n%s", i, mustJSON(t, rec))
		}
		parked = append(parked, rec.ApprovalID)
	}
	rec := b.run(spec)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictPendingLimit || rec.ApprovalID != "" || !strings.Contains(rec.Error, "-max-pending-bytes") {
		t.Fatalf("a park past the bound: want failed pending_limit:\n%s", mustJSON(t, rec))
	}
	n, err := store.PendingBytes(context.Background())
	if err != nil || n < 2*900000 || n > 2<<20 {
		t.Errorf("pending bytes %d, %v; want the two parked runs' 1800000 and their approvals' hashes, within the 2 MiB bound", n, err)
	}
	for _, id := range parked {
		if _, err := store.Data(context.Background(), id, "out/big.txt"); err != nil {
			t.Errorf("%s lost its staged bytes: %v", id, err)
		}
	}
	if code, out, errOut := b.runBin(bin.approve, "", "-prefix", prefix, "reject", parked[0], "-by", "alice", "-comment", "too big"); code != 0 {
		t.Fatalf("reject: exit %d %s%s", code, out, errOut)
	}
	if rec := b.run(spec); rec.State != record.StateParked {
		t.Fatalf("after a rejection made room: want parked:\n%s", mustJSON(t, rec))
	}
	if !strings.Contains(b.worker.logs.String(), "pending_limit") {
		t.Error("the worker's log does not mention the pending_limit verdict")
	}
}
