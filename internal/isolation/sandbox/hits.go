//go:build linux

package sandbox

import (
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/isolation/cgroup"
)

// HitPoll is how often a running step's cgroup is read for a limit hit
// (Result.PidsHitBy, OOMHitBy): the kernel counts refused forks and OOM
// kills but neither times them nor (cgroup v1) notifies a watcher of
// pids.events. A step shorter than HitPoll costs no read.
const HitPoll = 100 * time.Millisecond

// hitClock polls a step's cgroup for the first hit of its pids and memory
// limits, from a timer (no goroutine until the first poll is due), until
// stop.
type hitClock struct {
	g     *cgroup.Group
	m     cgroup.Mark
	start time.Time
	t     *time.Timer

	mu      sync.Mutex // held by a poll and by stop
	stopped bool
	pidsBy  time.Duration
	oomBy   time.Duration
}

// watchHits starts polling g for hits since m.
func watchHits(g *cgroup.Group, m cgroup.Mark) *hitClock {
	h := &hitClock{g: g, m: m, start: time.Now()}
	h.mu.Lock() // the first poll reads h.t
	h.t = time.AfterFunc(HitPoll, h.poll)
	h.mu.Unlock()
	return h
}

// poll reads the group once, and comes again unless both hits were seen.
func (h *hitClock) poll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	pids, oom := h.g.Hits(h.m)
	by := time.Since(h.start)
	if pids && h.pidsBy == 0 {
		h.pidsBy = by
	}
	if oom && h.oomBy == 0 {
		h.oomBy = by
	}
	if h.pidsBy == 0 || h.oomBy == 0 {
		h.t.Reset(HitPoll)
	}
}

// stop ends the poll and returns by when each hit was first seen (0:
// not seen). A nil clock saw nothing.
func (h *hitClock) stop() (pidsBy, oomBy time.Duration) {
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	h.t.Stop()
	return h.pidsBy, h.oomBy
}
