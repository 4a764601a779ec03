//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/session"
)

// Between two calls a session holds no slot, helper, uid or namespace:
// its workspace is parked, an archive (tmpfs.Workspace.Archive) in a file
// of the worker's sessions directory, and its handler waits on a channel,
// costing a goroutine. A call rings the worker's bell (one Redis list for
// all its sessions, one blocking read: session.Conn.Bells); the bell's
// reader wakes the session's handler, which takes the call (popped once),
// borrows a free slot, restores the workspace into it, serves the call,
// parks the workspace again and gives the slot back before it answers.
// The worker beats once for all its sessions (session.Conn.Alive).

// bells routes the rings of the worker's bell to the sessions it holds.
type bells struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// add registers session id and returns the channel its rings arrive on.
func (b *bells) add(id string) chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.m == nil {
		b.m = map[string]chan struct{}{}
	}
	b.m[id] = ch
	b.mu.Unlock()
	return ch
}

func (b *bells) remove(id string) {
	b.mu.Lock()
	delete(b.m, id)
	b.mu.Unlock()
}

// ring wakes session id's handler, if the worker holds it; a ring
// already pending stands for both.
func (b *bells) ring(id string) {
	b.mu.Lock()
	ch := b.m[id]
	b.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// serveBells reads the worker's bell and beats for its sessions until ctx
// ends: two goroutines, whatever the number of sessions.
func (w *Worker) serveBells(ctx context.Context) {
	go func() {
		t := time.NewTicker(session.BeatEvery)
		defer t.Stop()
		for {
			if err := w.sessions.Alive(ctx, w.name); err != nil && ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("session beat")
			}
			select {
			case <-ctx.Done():
				_ = w.sessions.Gone(context.WithoutCancel(ctx), w.name)
				return
			case <-t.C:
			}
		}
	}()
	for ctx.Err() == nil {
		ids, err := w.sessions.Bells(ctx, w.name, time.Second)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("session bell")
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		for _, id := range ids {
			w.bells.ring(id)
		}
	}
}

// nextCall returns the session's next call, waiting for a ring until
// until: nil, nil when none came by then.
func (w *Worker) nextCall(ctx context.Context, j *job, until time.Time) (*session.Call, error) {
	id := j.rec.TaskID
	for {
		call, err := w.sessions.Take(ctx, id)
		if err != nil || call != nil {
			return call, err
		}
		left := time.Until(until)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(left)
		select {
		case <-j.session.bell:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// sessionsDir is where the worker parks its sessions' workspaces.
func (w *Worker) sessionsDir() string { return filepath.Join(w.cfg.WorkspaceRoot, ".sessions") }

// park archives the workspace of j's seat into its session's file and
// gives the seat back: the session holds no slot until its next call.
func (w *Worker) park(j *job) error {
	h := j.session
	if j.seat.ws == nil {
		return nil
	}
	if h.archive == "" {
		h.archive = filepath.Join(w.sessionsDir(), j.rec.TaskID+".tar")
	}
	f, err := os.OpenFile(h.archive, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("park the session's workspace: %w", err)
	}
	_, _, aerr := j.seat.ws.Archive(f)
	size, _ := f.Seek(0, 1)
	if err := f.Close(); aerr == nil {
		aerr = err
	}
	if aerr != nil {
		return fmt.Errorf("park the session's workspace: %w", aerr)
	}
	w.sessionBytes.Add(size - h.archived)
	h.archived = size
	w.stand(j)
	return nil
}

// unpark borrows a free slot for j and restores its session's workspace
// there, as the last call left it.
func (w *Worker) unpark(ctx context.Context, j *job) error {
	if j.seat.slot != nil {
		return nil
	}
	if err := w.sit(ctx, j); err != nil {
		return err
	}
	f, err := os.Open(j.session.archive)
	if err != nil {
		return fmt.Errorf("restore the session's workspace: %w", err)
	}
	defer f.Close()
	if _, _, err := j.seat.ws.Restore(f); err != nil {
		return fmt.Errorf("restore the session's workspace: %w", err)
	}
	return nil
}

// dropArchive removes the session's parked workspace, if any.
func (w *Worker) dropArchive(h *heldSession) {
	if h.archive == "" {
		return
	}
	if err := os.Remove(h.archive); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.log.Warn().Err(err).Str("archive", h.archive).Msg("remove a session's parked workspace")
	}
	w.sessionBytes.Add(-h.archived)
	h.archived = 0
}
