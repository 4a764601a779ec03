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
// limits, on a goroutine of its own, until stop.
type hitClock struct {
	done   chan struct{}
	wg     sync.WaitGroup
	pidsBy time.Duration
	oomBy  time.Duration
}

// watchHits starts polling g for hits since m.
func watchHits(g *cgroup.Group, m cgroup.Mark) *hitClock {
	h := &hitClock{done: make(chan struct{})}
	start := time.Now()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(HitPoll)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
			}
			pids, oom := g.Hits(m)
			by := time.Since(start)
			if pids && h.pidsBy == 0 {
				h.pidsBy = by
			}
			if oom && h.oomBy == 0 {
				h.oomBy = by
			}
			if h.pidsBy != 0 && h.oomBy != 0 {
				return
			}
		}
	}()
	return h
}

// stop ends the poll and returns by when each hit was first seen (0:
// not seen). A nil clock saw nothing.
func (h *hitClock) stop() (pidsBy, oomBy time.Duration) {
	if h == nil {
		return 0, 0
	}
	close(h.done)
	h.wg.Wait()
	return h.pidsBy, h.oomBy
}
