package airlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/promote/storage"
	"github.com/airlock-run/airlock/record"
)

// ErrNotPromoted is matched (errors.Is) by the error of Result for a run
// whose output is not published: a *NotPromotedError says its state.
var ErrNotPromoted = errors.New("run not promoted")

// NotPromotedError is the error of Result for a run with no published
// output.
type NotPromotedError struct {
	TaskID string
	State  record.State // parked, accepted, rejected, expired, failed, completed (no output)...
	Why    string
}

func (e *NotPromotedError) Error() string {
	msg := fmt.Sprintf("airlock: task %s is %s, not promoted", e.TaskID, e.State)
	if e.Why != "" {
		msg += ": " + e.Why
	}
	return msg
}

// Is reports whether target is ErrNotPromoted.
func (e *NotPromotedError) Is(target error) bool { return target == ErrNotPromoted }

// ErrStoreUnreadable is matched (errors.Is) by the errors of Result that
// come from the store, not from Redis: a publication this process cannot
// find, read or trust. The HTTP API answers them as its own failure, never
// as Redis being unreachable.
var ErrStoreUnreadable = errors.New("airlock: the publication could not be read from the store")

// storeError marks an error of reading the store (ErrStoreUnreadable).
type storeError struct{ error }

func (e storeError) Is(target error) bool { return target == ErrStoreUnreadable }
func (e storeError) Unwrap() error        { return e.error }

// Published is a promoted run's output, as the store holds it.
type Published struct {
	Manifest approve.Manifest
	// Result is the JSON result (nil when the run had none).
	Result json.RawMessage
	// Where is where the store holds it: a directory of the worker's
	// filesystem store, or s3://bucket/prefix/run_id/task_id/ of an S3
	// store.
	Where string
}

// maxManifest and maxResult bound what Result reads.
const (
	maxManifest = 4 << 20
	maxResult   = 64 << 20
)

// Result returns the published output of task taskID: its manifest and
// its result, read from where the worker published them: the filesystem
// store, which this process must be able to read, or an S3 store, read
// with the AWS configuration of this process's environment
// (AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID...). The task is
// looked for in every queue; ResultIn looks in one. A run whose output is
// not published gives a *NotPromotedError that says its state (parked,
// rejected, expired, failed...: a run its worker refused too); a task in
// no queue, an error matching ErrNotFound.
func (c *Client) Result(ctx context.Context, taskID string) (*Published, error) {
	queue, err := c.Locate(ctx, taskID)
	if err != nil {
		if errors.Is(err, ErrAmbiguous) {
			return nil, fmt.Errorf("%w (ResultIn, enqueue -queue)", err)
		}
		return nil, err
	}
	return c.ResultIn(ctx, queue, taskID)
}

// ResultIn is Result for the task taskID of queue.
func (c *Client) ResultIn(ctx context.Context, queue, taskID string) (*Published, error) {
	info, err := c.insp.GetTaskInfo(queue, taskID)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		rec, err := c.refusedRecord(ctx, queue, taskID, err) // refused.go
		if err != nil {
			return nil, err
		}
		return nil, &NotPromotedError{TaskID: taskID, State: rec.State, Why: rec.Error}
	}
	if err != nil {
		return nil, fmt.Errorf("airlock: task %s: %w", taskID, err)
	}
	return c.published(ctx, taskID, info)
}

// published reads what task taskID published, as its info says.
func (c *Client) published(ctx context.Context, taskID string, info *asynq.TaskInfo) (*Published, error) {
	if len(info.Result) == 0 {
		return nil, &NotPromotedError{TaskID: taskID, State: record.State(info.State.String()), Why: "no run record yet"}
	}
	rec, err := decodeRecord(info)
	if err != nil {
		return nil, err
	}
	where := rec.PublishedTo
	if rec.ApprovalID != "" && where == "" {
		a, err := c.store.Get(ctx, rec.ApprovalID)
		if err != nil && !errors.Is(err, approve.ErrNotFound) {
			return nil, fmt.Errorf("airlock: approval %s: %w", rec.ApprovalID, err)
		}
		if err == nil {
			applyApproval(rec, a)
			where = a.PublishedTo
		}
	}
	if rec.State != record.StatePromoted {
		why := rec.Error
		if rec.Decision != nil && rec.State == record.StateParked {
			why = "waiting for approval " + rec.ApprovalID
		}
		return nil, &NotPromotedError{TaskID: taskID, State: rec.State, Why: why}
	}
	if where == "" && c.opts.Store == "" {
		return nil, &NotPromotedError{TaskID: taskID, State: rec.State, Why: "the store did not say where it published"}
	}
	if where, err = c.readFrom(ctx, info.Queue, taskID, rec, where); err != nil { // result_store.go
		return nil, err
	}
	p, err := readPublication(ctx, where, taskID, rec.RunID, info.Queue)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, storeError{c.noManifest(taskID, where, err)}
	}
	if err != nil {
		return nil, storeError{err}
	}
	return p, nil
}

// readPublication reads the publication at where of task taskID of run
// runID in queue: its manifest first (a run is published only once it
// exists; an error matching fs.ErrNotExist when it does not), which must
// name that task, run and queue (a forged record pointing at another
// queue's publication is refused), then its result.
func readPublication(ctx context.Context, where, taskID, runID, queue string) (*Published, error) {
	mb, err := storage.ReadFile(ctx, where, "manifest.json", maxManifest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("airlock: task %s was published to %s, which this process cannot read: %w", taskID, where, err)
	}
	p := &Published{Where: where}
	if err := json.Unmarshal(mb, &p.Manifest); err != nil {
		return nil, fmt.Errorf("airlock: %s/manifest.json: %w", where, err)
	}
	switch m := p.Manifest; {
	case m.TaskID != taskID:
		return nil, fmt.Errorf("airlock: %s holds task %s, not %s", where, m.TaskID, taskID)
	case m.RunID != runID:
		return nil, fmt.Errorf("airlock: %s holds run %s, not %s", where, m.RunID, runID)
	case m.Run.Queue != "" && m.Run.Queue != queue: // older manifests name no queue
		return nil, fmt.Errorf("airlock: %s holds a run of queue %q, not %q", where, m.Run.Queue, queue)
	}
	if p.Manifest.Result != nil {
		rb, err := storage.ReadFile(ctx, where, approve.ResultName, maxResult)
		if err != nil { // %v: a missing result is no missing manifest
			return nil, fmt.Errorf("airlock: %s: %v", where, err)
		}
		p.Result = rb
	}
	return p, nil
}

// PublishedArtifact returns the bytes of artifact name of the published
// output of task taskID of queue (read as Result reads), at most max
// bytes; the manifest must list the artifact, and the bytes must have
// the digest it gives. A run whose output is not published gives a
// *NotPromotedError.
func (c *Client) PublishedArtifact(ctx context.Context, queue, taskID, name string, max int64) ([]byte, error) {
	p, err := c.ResultIn(ctx, queue, taskID)
	if err != nil {
		return nil, err
	}
	for _, a := range p.Manifest.Artifacts {
		if a.Name != name {
			continue
		}
		if a.Bytes > max {
			return nil, fmt.Errorf("airlock: artifact %s of task %s is %d bytes, more than %d", name, taskID, a.Bytes, max)
		}
		b, err := storage.ReadFile(ctx, p.Where, name, max)
		if err != nil {
			return nil, storeError{fmt.Errorf("airlock: %s: %w", p.Where, err)}
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != a.SHA256 {
			return nil, fmt.Errorf("airlock: artifact %s of task %s in %s does not have the digest its manifest gives", name, taskID, p.Where)
		}
		return b, nil
	}
	return nil, fmt.Errorf("airlock: task %s published no artifact %q", taskID, name)
}
