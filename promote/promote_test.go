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
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/redistest"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

type bundle struct {
	store    *approve.Store
	sink     *promote.FS
	promoter *promote.Promoter
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
	b := &bundle{store: approve.NewStore(rdb, approve.Options{Prefix: prefix}), dir: t.TempDir()}
	b.sink = &promote.FS{Dir: b.dir}
	b.promoter = &promote.Promoter{Store: b.store, Sink: b.sink, Worker: "test"}
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
	data[promote.ResultName] = result
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
	var man promote.Manifest
	if err := json.Unmarshal(got["manifest.json"], &man); err != nil {
		t.Fatal(err)
	}
	delete(got, "manifest.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("published files (-want +got):\n%s", diff)
	}
	if man.ApprovalID != "ap-1" || man.AcceptedBy != "alice" || man.Result.SHA256 != sum(want[promote.ResultName]) || len(man.Artifacts) != 2 {
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
	m := &promote.Manifest{RunID: "run-ap-3", TaskID: "task-ap-3", ApprovalID: "ap-3"}
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
	if !errors.Is(err, promote.ErrRefused) {
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
	if _, _, err := b.promoter.Promote(context.Background(), "ap-5"); !errors.Is(err, promote.ErrRefused) {
		t.Fatalf("pending: want ErrRefused, got %v", err)
	}
	if _, _, err := b.promoter.Promote(context.Background(), "ap-missing"); !errors.Is(err, promote.ErrRefused) {
		t.Fatalf("missing: want ErrRefused, got %v", err)
	}
}

func TestSinkConflict(t *testing.T) {
	dir := t.TempDir()
	s := &promote.FS{Dir: dir}
	if _, err := s.Publish(context.Background(), &promote.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a1"}, nil); err != nil {
		t.Fatal(err)
	}
	// The same task published from another approval: refused, the first
	// publication stays.
	if _, err := s.Publish(context.Background(), &promote.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a2"}, nil); !errors.Is(err, promote.ErrConflict) {
		t.Fatalf("want ErrConflict, got %v", err)
	}
	for _, bad := range []string{"../x", "/etc/x", "manifest.json"} {
		if _, err := s.Publish(context.Background(), &promote.Manifest{RunID: "r2", TaskID: "t", ApprovalID: "a"}, map[string][]byte{bad: nil}); err == nil {
			t.Errorf("artifact %q was accepted", bad)
		}
	}
	for _, m := range []promote.Manifest{
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
		m := &promote.Manifest{RunID: "agent-run-7", TaskID: task, ApprovalID: "ap-" + task}
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
