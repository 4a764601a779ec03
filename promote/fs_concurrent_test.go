package promote_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/promote"
)

// TestFSConcurrentPublish: workers that share a store directory (FS
// values on one directory) publish the same approval at the same time, as
// a run's inline promotion and a promote task the sweeper queued for it
// can: at most one call publishes, and what lands is whole (a manifest
// with every file). They used to share one staging directory, which each
// emptied first: a publication could land without some of its files, or
// without its manifest (seen in the chaos test; RELIABILITY.md).
func TestFSConcurrentPublish(t *testing.T) {
	dir := t.TempDir()
	sinks := []*promote.FS{{Dir: dir}, {Dir: dir}, {Dir: dir}, {Dir: dir}}
	files := map[string][]byte{}
	for i := 0; i < 12; i++ {
		files[fmt.Sprintf("out/f%02d.txt", i)] = []byte(fmt.Sprintf("file %d\n", i))
	}
	const rounds = 30
	landed := 0
	for round := 0; round < rounds; round++ {
		id := fmt.Sprintf("ap-%04d", round)
		m := &approve.Manifest{RunID: "run", TaskID: "task-" + id, ApprovalID: id}
		var wg sync.WaitGroup
		pub := make([]bool, len(sinks))
		errs := make([]error, len(sinks))
		for i, s := range sinks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pub[i], errs[i] = s.Publish(context.Background(), m, files)
			}()
		}
		wg.Wait()
		n := 0
		for _, p := range pub {
			if p {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("round %d: %d calls published", round, n)
		}
		final := filepath.Join(dir, "run", "task-"+id)
		if _, err := os.Stat(filepath.Join(final, "manifest.json")); err != nil {
			if n > 0 {
				t.Fatalf("round %d: published %v without a manifest: %v", round, pub, err)
			}
			continue // both lost: the retries publish
		}
		landed++
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(final, name))
			if err != nil || string(got) != string(want) {
				t.Fatalf("round %d: %s: %q, %v (published %v, errors %v)", round, name, got, err, pub, errs)
			}
		}
	}
	t.Logf("%d of %d rounds published at once", landed, rounds)
}
