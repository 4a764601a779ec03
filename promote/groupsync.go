package promote

import "sync"

// groupSync shares the fsyncs of one directory among the publications
// that need one at the same time (group commit): a caller's change to the
// directory, made before it calls sync, is durable once an fsync that
// started after the call has succeeded, so callers that arrive while one
// runs wait for the next one and share it. "Published means durable" is
// unchanged: sync returns nil only after such an fsync succeeded.
type groupSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	running bool
	started uint64                 // fsyncs started so far; the running one's number
	done    uint64                 // the last finished fsync's number
	failed  uint64                 // the last failed fsync's number, 0 if none
	err     error                  // its error
	fsync   func(dir string) error // syncDir when nil (tests replace it)
}

// sync fsyncs dir, or waits for an fsync of dir that started after the
// call.
func (g *groupSync) sync(dir string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	// A running fsync may have started before this caller's change: the
	// next one to start is the first that covers it.
	need := g.started + 1
	for g.done < need {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		g.started++
		n := g.started
		fsync := g.fsync
		if fsync == nil {
			fsync = syncDir
		}
		g.mu.Unlock()
		err := fsync(dir)
		g.mu.Lock()
		g.running, g.done = false, n
		if err != nil {
			g.failed, g.err = n, err
		}
		g.cond.Broadcast()
	}
	if g.failed >= need {
		// An fsync after the change failed: whether the change reached
		// the disk is unknown.
		return g.err
	}
	return nil
}
