//go:build linux

package worker

import (
	"context"
	"fmt"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/network/egress"
	"github.com/airlock-run/airlock/tmpfs"
)

// A run sits in one of the worker's slots while it works: the slot's
// sandbox (with or without network), a fresh workspace of its quota and,
// networked, the slot's proxy serving the run's egress. A one-shot run
// keeps its seat for its whole attempt; a session gives it back between
// two calls (its workspace parked as an archive, sessionpark.go) and
// borrows one, any free one, for each call. Every step thus runs as a
// slot's uid in a slot's sandbox, confined as any step, whichever slot.
type seat struct {
	slot *slot
	box  *sandbox.Slot
	ws   *tmpfs.Workspace
}

// sit takes a free slot for j (waiting for one, or for ctx: then
// errHandedBack), its sandbox for the spec's network setting and a fresh
// workspace of the spec's quota.
func (w *Worker) sit(ctx context.Context, j *job) error {
	var s *slot
	select {
	case s = <-w.slots:
	case <-ctx.Done():
		return errHandedBack // shutdown (or a cancel) before a slot came free
	}
	box, err := s.sandboxFor(j.spec.Network)
	if err != nil {
		w.slots <- s
		return fmt.Errorf("network sandbox: %w", err)
	}
	ws, err := s.area.Create(int64(j.spec.Limits.Workspace))
	if err != nil {
		w.slots <- s
		return fmt.Errorf("create workspace: %w", err)
	}
	if j.egress != nil {
		s.egressRun.Store(j.egress)
	}
	j.seat = seat{slot: s, box: box, ws: ws}
	j.rec.Isolation.UID = s.uidN
	if j.spec.Network {
		// Say what this run's helper had, not the default one's.
		box.Status().Into(&j.rec.Isolation)
		j.rec.Isolation.Network = sandbox.EgressTier(egress.URL, w.cfg.EgressAllow, w.cfg.EgressMaxBytes, w.cfg.EgressMaxConns, w.cfg.EgressIdleTimeout)
	}
	return nil
}

// stand gives j's seat back, if it has one: the workspace emptied (a
// slot whose workspace could not be emptied is renewed), the proxy
// closed to the run, the slot free for the next task or call, and the
// gate told that the run's first slot is back (once).
func (w *Worker) stand(j *job) {
	s := j.seat.slot
	if s == nil {
		return
	}
	if err := j.seat.ws.Remove(); err != nil {
		w.log.Error().Err(err).Str("task_id", j.rec.TaskID).Str("trace_id", j.rec.TraceID).Msg("remove workspace; renewing the slot's workspace and restarting its helpers")
		s.renew(w)
	}
	if j.egress != nil {
		s.egressRun.Store(nil)
	}
	j.seat = seat{}
	w.slots <- s
	if j.released != nil {
		j.released()
	}
}
