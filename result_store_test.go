package airlock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestResultReadsWhereTheWorkerWrote: Result reads an absolute
// published_to as it is; a relative one (an older worker's) in the store
// the queue's workers announce, an error naming them when they announce
// several, and an error asking for the store when none does (never
// relative to this process's directory); ClientOptions.Store overrides
// all of it.
func TestResultReadsWhereTheWorkerWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, dir := redistest.Queue(t), t.TempDir()
	// A run_id starting "rel-" is published to "airlock-store/<run_id>/<task_id>",
	// as a worker with a relative -store said before workers made it absolute.
	redistest.ServePromoted(t, q, dir, func(where, runID, taskID string) string {
		if strings.HasPrefix(runID, "rel-") {
			return filepath.Join("airlock-store", runID, taskID)
		}
		return where
	})
	c := newClient(t, airlock.ClientOptions{Retention: time.Hour})
	run := func(runID string) string {
		t.Helper()
		spec := newSpec(q)
		spec.RunID = runID
		e, err := c.Enqueue(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, q, e.TaskID); err != nil {
			t.Fatal(err)
		}
		return e.TaskID
	}
	abs, rel := run("abs-1"), run("rel-1")

	if p, err := c.Result(ctx, abs); err != nil || p.Where != filepath.Join(dir, "abs-1", abs) || string(p.Result) != redistest.PromotedResult {
		t.Errorf("absolute published_to: %+v, %v", p, err)
	}
	// Relative, nothing announced: not read from here (a forged relative
	// path could lead anywhere), an error asking for the store.
	_, err := c.Result(ctx, rel)
	if want := "airlock: task " + rel + " was published to airlock-store/rel-1/" + rel + ", relative to its worker's directory, and no worker of queue \"" + q +
		"\" announces its store: give the workers' store (-store of enqueue, api or mcp; ClientOptions.Store)"; err == nil || err.Error() != want || !errors.Is(err, airlock.ErrStoreUnreadable) {
		t.Errorf("relative, no store announced: %v", err)
	}
	// One store announced: read there.
	rdb := redistest.Client(t)
	announce := func(name, store string) {
		t.Helper()
		if err := queuepolicy.Announce(ctx, rdb, "", []string{q}, queuepolicy.Announcement{Worker: name, Store: store}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	announce("w/1", dir)
	announce("w/2", dir)
	if p, err := c.ResultIn(ctx, q, rel); err != nil || p.Where != filepath.Join(dir, "rel-1", rel) {
		t.Errorf("relative, one store announced: %+v, %v", p, err)
	}
	// Two stores announced: no guess.
	announce("w/3", "s3://other-bucket/out")
	_, err = c.Result(ctx, rel)
	want := "airlock: task " + rel + " was published to airlock-store/rel-1/" + rel + ", relative to its worker's directory, and the workers of queue \"" + q +
		"\" announce 2 stores (" + dir + ", s3://other-bucket/out): say which holds it (-store of enqueue, api or mcp; ClientOptions.Store)"
	if err == nil || err.Error() != want {
		t.Errorf("relative, two stores announced:\n got %v\nwant %s", err, want)
	}
	// ClientOptions.Store: the reader's own view of the store wins.
	copied := t.TempDir()
	if err := os.CopyFS(filepath.Join(copied, "rel-1"), os.DirFS(filepath.Join(dir, "rel-1"))); err != nil {
		t.Fatal(err)
	}
	cs := newClient(t, airlock.ClientOptions{Store: copied})
	if p, err := cs.Result(ctx, rel); err != nil || p.Where != filepath.Join(copied, "rel-1", rel) {
		t.Errorf("ClientOptions.Store: %+v, %v", p, err)
	}
	_, err = cs.Result(ctx, abs)
	if !errors.Is(err, airlock.ErrNotPromoted) || !strings.HasSuffix(err.Error(), "; read in the store "+copied+" (-store): check that it is the workers' store") {
		t.Errorf("ClientOptions.Store without the task: %v", err)
	}
}

// TestEnqueueNoWorker: Enqueued.NoWorker says that no worker announced
// itself for the queue, or only long enough ago to be stale.
func TestEnqueueNoWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := redistest.Queue(t)
	rdb := redistest.Client(t)
	// A client that saw no worker reads the announcements again only
	// after AnnounceInterval too: it says no worker until then.
	unserved := newClient(t, airlock.ClientOptions{})
	if e, err := unserved.Enqueue(ctx, newSpec(q)); err != nil || !e.NoWorker {
		t.Errorf("nothing announced: %+v, %v; want NoWorker", e, err)
	}
	var c *airlock.Client
	for _, step := range []struct {
		announced time.Time // zero: nothing
		noWorker  bool
	}{
		{time.Time{}, true},
		{time.Now().Add(-2 * queuepolicy.AnnounceTTL), true},
		{time.Now(), false},
	} {
		if !step.announced.IsZero() {
			a := queuepolicy.Announcement{Worker: "w/1", Store: "/s"}
			if err := queuepolicy.Announce(ctx, rdb, "", []string{q}, a, step.announced); err != nil {
				t.Fatal(err)
			}
		}
		c = newClient(t, airlock.ClientOptions{})
		e, err := c.Enqueue(ctx, newSpec(q))
		if err != nil || e.NoWorker != step.noWorker || e.TaskID == "" {
			t.Errorf("announced at %v: %+v, %v; want NoWorker %v", step.announced, e, err, step.noWorker)
		}
	}
	// A client that saw a worker reads the announcements again only after
	// AnnounceInterval: the worker gone, it still says served; a new
	// client reads and says no worker.
	if e, err := unserved.Enqueue(ctx, newSpec(q)); err != nil || !e.NoWorker {
		t.Errorf("within AnnounceInterval of an unserved enqueue: %+v, %v; want NoWorker, not read again", e, err)
	}
	if err := queuepolicy.Withdraw(ctx, rdb, "", []string{q}, "w/1"); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Enqueue(ctx, newSpec(q)); err != nil || e.NoWorker {
		t.Errorf("within AnnounceInterval of a served enqueue: %+v, %v; want NoWorker false, not read again", e, err)
	}
	if e, err := newClient(t, airlock.ClientOptions{}).Enqueue(ctx, newSpec(q)); err != nil || !e.NoWorker {
		t.Errorf("a new client after the withdrawal: %+v, %v; want NoWorker", e, err)
	}
}

// TestResultRefusesForgedPublishedTo: a record's published_to that is not
// the shape of its run's publication is not read, nor a link the
// publication holds to a file outside it (someone who can write Redis and
// plant a directory cannot make a reader serve a file of its choice).
func TestResultRefusesForgedPublishedTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, dir := redistest.Queue(t), t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"password": "hunter2"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	redistest.ServePromoted(t, q, dir, func(where, runID, taskID string) string {
		switch {
		case strings.HasPrefix(runID, "elsewhere-"):
			return filepath.Dir(secret)
		case strings.HasPrefix(runID, "dotdot-"):
			return where + "/../../" + runID + "/" + taskID
		case strings.HasPrefix(runID, "s3-"):
			return "s3://bucket/prefix/other/" + taskID + "/"
		case strings.HasPrefix(runID, "queue-"):
			// The publication of the same ids in another queue: what a
			// forged task in this queue would point at.
			m := `{"run_id": "` + runID + `", "task_id": "` + taskID + `", "run": {"queue": "someone-elses"}, "result": {"name": "result.json"}}`
			if err := os.WriteFile(filepath.Join(where, "manifest.json"), []byte(m), 0o600); err != nil {
				t.Error(err)
			}
		case strings.HasPrefix(runID, "link-"):
			res := filepath.Join(where, "result.json")
			if err := os.Remove(res); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(secret, res); err != nil {
				t.Error(err)
			}
		}
		return where
	})
	c := newClient(t, airlock.ClientOptions{Retention: time.Hour})
	for _, tc := range []struct{ runID, want string }{
		{"elsewhere-1", "does not end with /elsewhere-1/"},
		{"dotdot-1", "is not a clean absolute path"},
		{"s3-1", "does not end with /s3-1/"},
		{"link-1", "result.json: a symbolic link, which no store writes"},
		{"queue-1", `holds a run of queue "someone-elses"`},
	} {
		spec := newSpec(q)
		spec.RunID = tc.runID
		e, err := c.Enqueue(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, q, e.TaskID); err != nil {
			t.Fatal(err)
		}
		p, err := c.Result(ctx, e.TaskID)
		t.Logf("%s: %v", tc.runID, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) || p != nil {
			t.Errorf("%s: %+v, %v; want an error with %q", tc.runID, p, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error holds the secret: %v", tc.runID, err)
		}
		if !errors.Is(err, airlock.ErrStoreUnreadable) {
			t.Errorf("%s: %v does not match ErrStoreUnreadable", tc.runID, err)
		}
	}
}
