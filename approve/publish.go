package approve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/record"
)

// ErrRefused marks a promotion that must not happen and must not be
// retried: the approval is not accepted, or staged bytes changed since
// they were approved.
var ErrRefused = errors.New("promotion refused")

// Promoter publishes accepted approvals to a Sink, and marks them
// promoted in Store: a promote task's transitions are the run's events
// (Promote), those of the worker that ran the task are not
// (PromoteInline).
type Promoter struct {
	Store  *Store
	Sink   Sink
	Worker string // recorded as promoted_by
}

// Promote publishes the output of an accepted approval, exactly once:
// publishing an approval that was already published changes nothing, and
// the approval is marked promoted in either case. It returns the manifest
// and whether this call published it.
//
// Its span (airlock.promote) is a child of the span that parked the
// approval, in the run's trace.
func (p *Promoter) Promote(ctx context.Context, approvalID string) (m *Manifest, published bool, err error) {
	start := time.Now()
	a, err := p.load(ctx, approvalID)
	if err != nil {
		return nil, false, err
	}
	ctx, span := p.Store.startSpan(ctx, tracing.SpanPromote, a, start)
	defer func() { endPromote(span, m, published, err) }()
	return p.promote(ctx, a)
}

// load reads the approval to promote: one that is not found is refused.
func (p *Promoter) load(ctx context.Context, id string) (*Approval, error) {
	a, err := p.Store.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: approval %s not found", ErrRefused, id)
	}
	return a, err
}

// promote is Promote of a, as the store holds it.
func (p *Promoter) promote(ctx context.Context, a *Approval) (*Manifest, bool, error) {
	m, published, ops, err := p.publish(ctx, a, func(name string) ([]byte, error) { return p.Store.Data(ctx, a.ID, name) }, false)
	if err == nil && ops != nil {
		err = p.Store.Apply(ctx, a.ID, ops)
	}
	if err != nil {
		return nil, published, err
	}
	return m, published, nil
}

// PromoteInline publishes an approval that the caller, the worker that
// ran its task, has just parked accepted (Store.Park returned it, with
// created), and reports the run's state itself, with its record: its
// transitions append no run event (Store.Quiet). When created, the data
// it staged is what the caller holds, so it is published from data, not
// read back (the digests are checked all the same), and the approval's
// index and audit updates are left to the caller, who sends ops in a
// round trip of its own (Store.Apply; the worker sends them with the
// run's record); ops is nil when there is nothing to send. When not
// created (an earlier attempt parked it), it is Promote, from the store.
func (p *Promoter) PromoteInline(ctx context.Context, a *Approval, data map[string][]byte, created bool) (m *Manifest, published bool, ops Ops, err error) {
	ctx, span := p.Store.startSpan(ctx, tracing.SpanPromote, a, time.Now())
	defer func() { endPromote(span, m, published, err) }()
	quiet := &Promoter{Store: p.Store.Quiet(), Sink: p.Sink, Worker: p.Worker}
	if !created {
		stored, err := quiet.load(ctx, a.ID)
		if err != nil {
			return nil, false, nil, err
		}
		m, published, err = quiet.promote(ctx, stored)
		return m, published, nil, err
	}
	return quiet.publish(ctx, a, parked(data), true)
}

// parked reads an artifact's bytes from what its caller parked.
func parked(data map[string][]byte) func(name string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		b, ok := data[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return b, nil
	}
}

// publish publishes a, an approval as the store holds it, reading each
// artifact's staged bytes with data, and marks it promoted; it returns
// the index and audit updates of that mark, for the caller to send.
//
// fresh: the caller's own park just created a (PromoteInline), so that
// the mark's updates are only what the promotion changes.
func (p *Promoter) publish(ctx context.Context, a *Approval, data func(name string) ([]byte, error), fresh bool) (*Manifest, bool, Ops, error) {
	if a.State != StateAccepted {
		return nil, false, nil, fmt.Errorf("%w: approval %s is %s, not accepted", ErrRefused, a.ID, a.State)
	}
	m := &Manifest{
		RunID: a.RunID, TaskID: a.TaskID, ApprovalID: a.ID,
		AcceptedBy: a.DecidedBy, AcceptedAt: a.DecidedAt, Comment: a.Comment, Reasons: a.Reasons,
		Artifacts: []record.Artifact{}, Run: a.Run, PromotedBy: p.Worker,
	}
	if !a.PromotedAt.IsZero() {
		// Done by an earlier try, which may have died before sending
		// its index updates (MarkPromotedOps): set them again.
		m.PromotedAt = a.PromotedAt
		return m, false, nil, p.Store.Reindex(ctx, a)
	}
	files := map[string][]byte{}
	if len(a.Result) > 0 {
		if sum := hexSHA(a.Result); sum != a.ResultSHA256 {
			return nil, false, nil, fmt.Errorf("%w: result of %s: sha256 %s, approved %s", ErrRefused, a.ID, sum, a.ResultSHA256)
		}
		files[ResultName] = a.Result
		m.Result = &record.Artifact{Name: ResultName, Bytes: int64(len(a.Result)), SHA256: a.ResultSHA256, ContentType: "application/json"}
	}
	for _, art := range a.Artifacts {
		data, err := data(art.Name)
		if err != nil {
			return nil, false, nil, fmt.Errorf("staged %s of %s: %w", art.Name, a.ID, err)
		}
		if sum := hexSHA(data); sum != art.SHA256 || int64(len(data)) != art.Bytes {
			return nil, false, nil, fmt.Errorf("%w: staged %s of %s changed since it was approved: sha256 %s (%d bytes), approved %s (%d bytes)",
				ErrRefused, art.Name, a.ID, sum, len(data), art.SHA256, art.Bytes)
		}
		if art.Name == ResultName {
			return nil, false, nil, fmt.Errorf("%w: artifact %s clashes with the result", ErrRefused, art.Name)
		}
		files[art.Name] = data
		m.Artifacts = append(m.Artifacts, record.Artifact{Name: art.Name, Bytes: art.Bytes, SHA256: art.SHA256, ContentType: art.ContentType})
	}
	m.PromotedAt = time.Now().UTC()
	published, err := p.Sink.Publish(ctx, m, files)
	if errors.Is(err, ErrConflict) {
		return nil, false, nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if err != nil {
		return nil, false, nil, err
	}
	var created *Approval
	if fresh {
		created = a
	}
	ops, err := p.Store.markPromotedOps(ctx, a.ID, m.PromotedAt, p.Sink.Where(m.RunID, m.TaskID), created)
	if err != nil {
		return nil, published, nil, err
	}
	return m, published, ops, nil
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
