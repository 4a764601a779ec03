package promote

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupSyncCoversEachCaller: concurrent callers share fsyncs, and each
// returns only once an fsync that started after its change has finished.
func TestGroupSyncCoversEachCaller(t *testing.T) {
	var changes atomic.Int64 // changes made to the directory
	var durable atomic.Int64 // changes an fsync has made durable
	var calls atomic.Int64
	g := &groupSync{fsync: func(string) error {
		calls.Add(1)
		covered := changes.Load() // what this fsync covers: what was made before it started
		time.Sleep(2 * time.Millisecond)
		for {
			d := durable.Load()
			if covered <= d || durable.CompareAndSwap(d, covered) {
				return nil
			}
		}
	}}
	const callers = 64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := changes.Add(1)
			if err := g.sync("dir"); err != nil {
				errs <- err
				return
			}
			if d := durable.Load(); d < mine {
				errs <- errors.New("sync returned before the caller's change was covered")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := calls.Load(); n >= callers || n < 1 {
		t.Errorf("%d fsyncs for %d concurrent callers, want between 1 and %d (shared)", n, callers, callers-1)
	}
	t.Logf("%d fsyncs for %d callers", calls.Load(), callers)
}

// TestGroupSyncError: a caller whose covering fsync failed gets its error;
// one that comes after gets a new fsync.
func TestGroupSyncError(t *testing.T) {
	boom := errors.New("EIO")
	fail := true
	g := &groupSync{fsync: func(string) error {
		if fail {
			return boom
		}
		return nil
	}}
	if err := g.sync("dir"); !errors.Is(err, boom) {
		t.Fatalf("sync = %v, want %v", err, boom)
	}
	fail = false
	if err := g.sync("dir"); err != nil {
		t.Fatalf("sync after a failed one = %v, want nil", err)
	}
}
