package promote_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

type bundle struct {
	rdb      redis.UniversalClient
	prefix   string
	store    *approve.Store
	sink     *promote.FS
	promoter *approve.Promoter
	dir      string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := "test:" + redistest.Queue(t) + ":"
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	b := &bundle{rdb: rdb, prefix: prefix, store: approve.NewStore(rdb, approve.Options{Prefix: prefix}), dir: t.TempDir()}
	b.sink = &promote.FS{Dir: b.dir}
	b.promoter = &approve.Promoter{Store: b.store, Sink: b.sink, Worker: "test"}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// park stages an approval with a result and two artifacts, and accepts it.
func (b *bundle) parkAccepted(t *testing.T, id string) map[string][]byte {
	t.Helper()
	result := []byte(`{"total": 42}`)
	data := map[string][]byte{"out/a.csv": []byte("x,y\n1,2\n"), "out/sub/b.txt": []byte("hello\n")}
	a := &approve.Approval{ID: id, TaskID: "task-" + id, RunID: "run-" + id, State: approve.StatePending,
		Reasons: []string{"no policy"}, Result: result, ResultSHA256: sum(result)}
	names := []string{"out/a.csv", "out/sub/b.txt"}
	for _, n := range names {
		a.Artifacts = append(a.Artifacts, record.Artifact{Name: n, Bytes: int64(len(data[n])), SHA256: sum(data[n]), ContentType: "text/plain"})
	}
	if _, _, err := b.store.Park(context.Background(), a, data); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Accept(context.Background(), id, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	data[approve.ResultName] = result
	return data
}

// published reads back what the store holds for a run.
func published(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		got[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestPromoteOnce(t *testing.T) {
	b := setup(t)
	want := b.parkAccepted(t, "ap-1")
	m, pub, err := b.promoter.Promote(context.Background(), "ap-1")
	if err != nil || !pub {
		t.Fatalf("promote: published=%v err=%v", pub, err)
	}
	got := published(t, filepath.Join(b.dir, "run-ap-1", "task-ap-1"))
	var man approve.Manifest
	if err := json.Unmarshal(got["manifest.json"], &man); err != nil {
		t.Fatal(err)
	}
	delete(got, "manifest.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("published files (-want +got):\n%s", diff)
	}
	if man.ApprovalID != "ap-1" || man.AcceptedBy != "alice" || man.Result.SHA256 != sum(want[approve.ResultName]) || len(man.Artifacts) != 2 {
		t.Errorf("manifest: %+v", man)
	}
	if m.RunID != "run-ap-1" || m.TaskID != "task-ap-1" {
		t.Errorf("returned manifest %+v", m)
	}
	// A retried promote task and a second accept change nothing.
	if _, pub, err := b.promoter.Promote(context.Background(), "ap-1"); err != nil || pub {
		t.Fatalf("second promote: published=%v err=%v", pub, err)
	}
	if _, err := b.store.Accept(context.Background(), "ap-1", "bob", ""); !errors.Is(err, approve.ErrAlreadyDecided) {
		t.Fatalf("second accept: %v", err)
	}
	a, err := b.store.Get(context.Background(), "ap-1")
	if err != nil || a.PromotedAt.IsZero() {
		t.Fatalf("approval not marked promoted: %+v %v", a, err)
	}
	ents, _ := os.ReadDir(b.dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if diff := cmp.Diff([]string{".staging", "run-ap-1"}, names); diff != "" {
		t.Errorf("store entries (-want +got):\n%s", diff)
	}
}

// TestPromoteAfterCrash: a crash left a half-written staging directory,
// then another one came after the publication but before the approval was
// marked: the retry publishes once, whole.
func TestPromoteAfterCrash(t *testing.T) {
	b := setup(t)
	want := b.parkAccepted(t, "ap-2")
	staging := filepath.Join(b.dir, ".staging", "ap-2")
	if err := os.MkdirAll(filepath.Join(staging, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "out", "a.csv"), []byte("x,"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.dir, "run-ap-2", "task-ap-2")); !os.IsNotExist(err) {
		t.Fatal("a partial publication is visible")
	}
	if _, pub, err := b.promoter.Promote(context.Background(), "ap-2"); err != nil || !pub {
		t.Fatalf("promote after crash: published=%v err=%v", pub, err)
	}
	got := published(t, filepath.Join(b.dir, "run-ap-2", "task-ap-2"))
	delete(got, "manifest.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("published files (-want +got):\n%s", diff)
	}
	// Crash between publication and MarkPromoted: simulate by publishing
	// through the sink directly for a fresh approval, then promoting.
	b.parkAccepted(t, "ap-3")
	m := &approve.Manifest{RunID: "run-ap-3", TaskID: "task-ap-3", ApprovalID: "ap-3"}
	if _, err := b.sink.Publish(context.Background(), m, map[string][]byte{"x": []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if _, pub, err := b.promoter.Promote(context.Background(), "ap-3"); err != nil || pub {
		t.Fatalf("promote of an already published approval: published=%v err=%v", pub, err)
	}
	if a, _ := b.store.Get(context.Background(), "ap-3"); a.PromotedAt.IsZero() {
		t.Fatal("not marked promoted")
	}
}

func TestPromoteRefusesAlteredBytes(t *testing.T) {
	b := setup(t)
	b.parkAccepted(t, "ap-4")
	// Alter a staged artifact behind the store's back: the approval recorded
	// the sha256 of what the approver saw.
	tamper(t, b, "ap-4", "out/a.csv", []byte("evil\n"))
	_, _, err := b.promoter.Promote(context.Background(), "ap-4")
	if !errors.Is(err, approve.ErrRefused) {
		t.Fatalf("want ErrRefused, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(b.dir, "run-ap-4")); !os.IsNotExist(err) {
		t.Fatal("altered output was published")
	}
}

func TestPromoteRefusesUnaccepted(t *testing.T) {
	b := setup(t)
	a := &approve.Approval{ID: "ap-5", TaskID: "t", RunID: "run-ap-5", State: approve.StatePending, Reasons: []string{"x"}}
	if _, _, err := b.store.Park(context.Background(), a, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.promoter.Promote(context.Background(), "ap-5"); !errors.Is(err, approve.ErrRefused) {
		t.Fatalf("pending: want ErrRefused, got %v", err)
	}
	if _, _, err := b.promoter.Promote(context.Background(), "ap-missing"); !errors.Is(err, approve.ErrRefused) {
		t.Fatalf("missing: want ErrRefused, got %v", err)
	}
}

func TestSinkConflict(t *testing.T) {
	dir := t.TempDir()
	s := &promote.FS{Dir: dir}
	if _, err := s.Publish(context.Background(), &approve.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a1"}, nil); err != nil {
		t.Fatal(err)
	}
	// The same task published from another approval: refused, the first
	// publication stays.
	if _, err := s.Publish(context.Background(), &approve.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a2"}, nil); !errors.Is(err, approve.ErrConflict) {
		t.Fatalf("want ErrConflict, got %v", err)
	}
	for _, bad := range []string{"../x", "/etc/x", "manifest.json"} {
		if _, err := s.Publish(context.Background(), &approve.Manifest{RunID: "r2", TaskID: "t", ApprovalID: "a"}, map[string][]byte{bad: nil}); err == nil {
			t.Errorf("artifact %q was accepted", bad)
		}
	}
	for _, m := range []approve.Manifest{
		{RunID: "r", TaskID: "", ApprovalID: "a3"}, {RunID: "r", TaskID: "../t", ApprovalID: "a3"},
		{RunID: ".staging", TaskID: "t", ApprovalID: "a3"}, {RunID: "r", TaskID: "t3", ApprovalID: "../a3"},
	} {
		if _, err := s.Publish(context.Background(), &m, nil); err == nil {
			t.Errorf("manifest %+v was published", m)
		}
	}
}

// TestSinkTasksOfOneRun: several tasks of one run all publish, each under
// its own name; a task that reuses the run_id can neither block nor
// overwrite another's publication.
func TestSinkTasksOfOneRun(t *testing.T) {
	dir := t.TempDir()
	s := &promote.FS{Dir: dir}
	for _, task := range []string{"extract", "transform", "intruder"} {
		m := &approve.Manifest{RunID: "agent-run-7", TaskID: task, ApprovalID: "ap-" + task}
		if pub, err := s.Publish(context.Background(), m, map[string][]byte{"result.json": []byte(`"` + task + `"`)}); err != nil || !pub {
			t.Fatalf("%s: published=%v err=%v", task, pub, err)
		}
	}
	for _, task := range []string{"extract", "transform", "intruder"} {
		b, err := os.ReadFile(filepath.Join(dir, "agent-run-7", task, "result.json"))
		if err != nil || string(b) != `"`+task+`"` {
			t.Errorf("%s: %q %v", task, b, err)
		}
	}
	if got := s.Where("agent-run-7", "extract"); got != filepath.Join(dir, "agent-run-7", "extract") {
		t.Errorf("Where = %s", got)
	}
}

// tamper rewrites a staged artifact behind the store's back, as someone
// with access to Redis could.
func tamper(t *testing.T, b *bundle, id, name string, data []byte) {
	t.Helper()
	if err := redistest.Client(t).HSet(context.Background(), b.store.Keys(id)[1], name, data).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Data(context.Background(), id, name)
	if err != nil || string(got) != string(data) {
		t.Fatalf("tamper did not take: %q %v", got, err)
	}
}

// TestPromoteInline publishes an approval from what its parker holds, as
// Promote publishes it from the store, and refuses bytes that are not the
// approved ones.
func TestPromoteInline(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	result := []byte(`{"total": 7}`)
	data := map[string][]byte{"out/a.csv": []byte("x\n1\n")}
	park := func(id string) *approve.Approval {
		a := &approve.Approval{ID: id, TaskID: "task-" + id, RunID: "run-" + id, State: approve.StateAccepted,
			DecidedBy: "policy:test", Result: result, ResultSHA256: sum(result),
			Artifacts: []record.Artifact{{Name: "out/a.csv", Bytes: int64(len(data["out/a.csv"])), SHA256: sum(data["out/a.csv"]), ContentType: "text/csv"}}}
		stored, created, err := b.store.Park(ctx, a, data)
		if err != nil || !created {
			t.Fatalf("Park = created %v, %v", created, err)
		}
		return stored
	}
	stored := park("ap-parked")
	m, published, ops, err := b.promoter.PromoteInline(ctx, stored, data, true)
	if err == nil {
		err = b.store.Apply(ctx, stored.ID, ops)
	}
	if err != nil || !published {
		t.Fatalf("PromoteInline = published %v, %v", published, err)
	}
	got := publishedFiles(t, b.sink.Where(m.RunID, m.TaskID))
	want := map[string][]byte{"out/a.csv": data["out/a.csv"], approve.ResultName: result}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("published files (-want +got):\n%s", diff)
	}
	a, err := b.store.Get(ctx, "ap-parked")
	if err != nil || a.PromotedAt.IsZero() {
		t.Fatalf("approval after PromoteInline: promoted at %v, %v", a.PromotedAt, err)
	}

	other := park("ap-parked-tampered")
	_, _, _, err = b.promoter.PromoteInline(ctx, other, map[string][]byte{"out/a.csv": []byte("y\n2\n")}, true)
	if !errors.Is(err, approve.ErrRefused) {
		t.Fatalf("PromoteInline with other bytes = %v, want ErrRefused", err)
	}
}

// publishedFiles reads the files of one publication but its manifest.
func publishedFiles(t *testing.T, where string) map[string][]byte {
	t.Helper()
	got := published(t, where)
	delete(got, "manifest.json")
	return got
}

// TestFSPublishManyFiles: a publication with more files than are held
// open at once (they are fsynced and closed by batches) is whole.
func TestFSPublishManyFiles(t *testing.T) {
	sink := &promote.FS{Dir: t.TempDir()}
	files := map[string][]byte{}
	for i := range 150 {
		files[filepath.Join("out", "d"+strconv.Itoa(i%3), "f"+strconv.Itoa(i)+".txt")] = []byte(strconv.Itoa(i))
	}
	m := &approve.Manifest{RunID: "run-many", TaskID: "task-many", ApprovalID: "ap-many", Artifacts: []record.Artifact{}}
	published, err := sink.Publish(context.Background(), m, files)
	if err != nil || !published {
		t.Fatalf("Publish = %v, %v", published, err)
	}
	got := publishedFiles(t, sink.Where(m.RunID, m.TaskID))
	if diff := cmp.Diff(files, got); diff != "" {
		t.Errorf("published files (-want +got):\n%s", diff)
	}
	staging, err := os.ReadDir(filepath.Join(sink.Dir, ".staging"))
	if err != nil || len(staging) != 0 {
		t.Errorf("staging directory after a publication: %v, %v", staging, err)
	}
}

// TestFSSweepsStaleStaging: a publication removes staging directories
// that crashed tries left over an hour ago, of any approval, and leaves
// recent ones (a publication in flight) alone.
func TestFSSweepsStaleStaging(t *testing.T) {
	sink := &promote.FS{Dir: t.TempDir()}
	root := filepath.Join(sink.Dir, ".staging")
	old, recent := filepath.Join(root, "ap-crashed+123"), filepath.Join(root, "ap-inflight+456")
	for _, d := range []string{old, recent} {
		if err := os.MkdirAll(filepath.Join(d, "out"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	m := &approve.Manifest{RunID: "run-s", TaskID: "task-s", ApprovalID: "ap-s", Artifacts: []record.Artifact{}}
	if _, err := sink.Publish(context.Background(), m, map[string][]byte{"out/x": []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a staging directory two hours old survived: %v", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("a recent staging directory was removed: %v", err)
	}
}

// unpromoted reports whether the store's accepted-not-promoted index
// lists id, as Redis holds it (ListAccepted would drop a stale entry).
func (b *bundle) unpromoted(t *testing.T, id string) bool {
	t.Helper()
	err := b.rdb.ZScore(context.Background(), b.prefix+"approvals:unpromoted", id).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return err == nil
}

// TestPromoteInlineOps: the index and audit updates of an inline
// promotion are the caller's to send; until they are, the approval is
// promoted but indexed as not; once sent, it is indexed as promoted.
func TestPromoteInlineOps(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.parkAccepted(t, "ap-ops")
	a, err := b.store.Get(ctx, "ap-ops")
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for _, art := range a.Artifacts {
		if data[art.Name], err = b.store.Data(ctx, a.ID, art.Name); err != nil {
			t.Fatal(err)
		}
	}
	_, pub, ops, err := b.promoter.PromoteInline(ctx, a, data, true)
	if err != nil || !pub || ops == nil {
		t.Fatalf("PromoteInline: published=%v ops=%v err=%v", pub, ops != nil, err)
	}
	if got, _ := b.store.Get(ctx, "ap-ops"); got == nil || got.PromotedAt.IsZero() {
		t.Fatalf("not marked promoted: %+v", got)
	}
	if !b.unpromoted(t, "ap-ops") {
		t.Fatal("the index changed before the caller sent the updates")
	}
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { ops(ctx, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if b.unpromoted(t, "ap-ops") {
		t.Error("still indexed as not promoted once the updates were sent")
	}
}

// TestPromoteRepairsLostIndexes: a promotion whose index updates were
// lost (a worker that died before its record) is repaired by the next
// promotion of it, which publishes nothing.
func TestPromoteRepairsLostIndexes(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	b.parkAccepted(t, "ap-lost")
	if _, err := b.store.MarkPromotedOps(ctx, "ap-lost", time.Time{}, "somewhere"); err != nil {
		t.Fatal(err)
	}
	if !b.unpromoted(t, "ap-lost") {
		t.Fatal("the index changed without the updates")
	}
	if _, pub, err := b.promoter.Promote(ctx, "ap-lost"); err != nil || pub {
		t.Fatalf("promote: published=%v err=%v", pub, err)
	}
	if b.unpromoted(t, "ap-lost") {
		t.Error("the promotion did not repair the index")
	}
}
