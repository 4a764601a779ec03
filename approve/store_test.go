package approve_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/testkit/testclock"
	"github.com/airlock-run/airlock/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: testclock.Epoch()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sample returns a pending approval with one text artifact and its data.
func sample(id, queue string) (*approve.Approval, map[string][]byte) {
	data := []byte("region,amount\neu,10\nus,32\n")
	exit := 0
	return &approve.Approval{
		ID: id, TaskID: "task-" + id, RunID: "run-" + id, State: approve.StatePending,
		Reasons: []string{"artifacts matched out/*.csv", "rule big: /total is 42 > 10"},
		Checked: []record.Check{{Rule: "big", Pointer: "/total"}},
		Result:  []byte(`{"total":42}`),
		Artifacts: []record.Artifact{
			{Name: "out/report.csv", Bytes: int64(len(data)), SHA256: digest(data), ContentType: "text/csv"},
		},
		Run: approve.RunSummary{
			Queue: queue, Action: "report", Secrets: []string{"PARTNER_TOKEN"}, Attempt: 1, StepsMS: 12.5, Worker: "host/1",
			Steps: []approve.StepSummary{{Name: "sum", Argv: []string{"sh", "sum.sh"}, Verdict: "ok", ExitCode: &exit}},
		},
	}, map[string][]byte{"out/report.csv": data}
}

func park(t *testing.T, s *approve.Store, a *approve.Approval, data map[string][]byte) *approve.Approval {
	t.Helper()
	got, created, err := s.Park(context.Background(), a, data)
	if err != nil || !created {
		t.Fatalf("Park(%s) = created %v, %v", a.ID, created, err)
	}
	return got
}

func TestParkGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s, _, q := approvetest.Store(t, approve.Options{Now: clk.Now})
	a, data := sample("ap-000000000001", q)
	a.CreatedAt = clk.Now().Add(-time.Minute + 1234) // nanoseconds: kept to the microsecond
	got := park(t, s, a, data)

	want := *a
	want.CreatedAt = clk.Now().Add(-time.Minute + 1000)
	want.ExpiresAt = clk.Now().Add(approve.DefaultTTL)
	// The artifacts' bytes and the whole hash as stored.
	if got.StagedBytes <= int64(len(a.Result)+len(data["out/report.csv"])) {
		t.Errorf("StagedBytes %d", got.StagedBytes)
	}
	want.StagedBytes = got.StagedBytes
	// The run summary's "any" fields come back as JSON values.
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("Park returned (-want +got):\n%s", diff)
	}
	stored, err := s.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, stored); diff != "" {
		t.Errorf("Get differs from what Park returned (-park +get):\n%s", diff)
	}
	// A list reads the action with the summary fields.
	if l, err := s.List(ctx, approve.StatePending, 1); err != nil || len(l) != 1 || l[0].Summary().Action != "report" {
		t.Errorf("List = %+v, %v: want the action", l, err)
	}
	b, err := s.Data(ctx, a.ID, "out/report.csv")
	if err != nil || string(b) != string(data["out/report.csv"]) {
		t.Errorf("Data = %q, %v", b, err)
	}
	if _, err := s.Data(ctx, a.ID, "out/other"); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("Data of an unknown artifact: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"ap-missing", "a{b}", ""} {
		if _, err := s.Get(ctx, id); !errors.Is(err, approve.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", id, err)
		}
	}
}

func TestParkIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, q := approvetest.Store(t, approve.Options{})
	a, data := sample("ap-000000000001", q)
	first := park(t, s, a, data)

	b, _ := sample("ap-000000000001", q)
	b.Reasons = []string{"something else"}
	b.State = approve.StateAccepted
	b.DecidedBy = "policy:default"
	b.Artifacts = nil
	again, created, err := s.Park(ctx, b, nil)
	if err != nil || created {
		t.Fatalf("second Park: created %v, %v; want false, nil", created, err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("second Park returned (-first +second):\n%s", diff)
	}
	stored, err := s.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, stored); diff != "" {
		t.Errorf("stored approval changed (-first +now):\n%s", diff)
	}
	h, err := s.History(ctx, a.ID)
	if err != nil || len(h) != 1 {
		t.Errorf("History = %+v, %v; want the one park event", h, err)
	}
	l, err := s.List(ctx, "", 0)
	if err != nil || len(l) != 1 {
		t.Errorf("List = %d approvals, %v; want 1", len(l), err)
	}
	// The same id for another task is not the same approval.
	c, _ := sample("ap-000000000001", q)
	c.TaskID = "another-task"
	if _, _, err := s.Park(ctx, c, nil); !errors.Is(err, approve.ErrIDTaken) || !strings.Contains(err.Error(), first.TaskID) {
		t.Errorf("Park of a taken id: %v, want ErrIDTaken naming task %s", err, first.TaskID)
	}
}

func TestParkTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prefix, q := approvetest.Prefix(t)
	rdb := redistest.Client(t)
	s := approve.NewStore(rdb, approve.Options{Prefix: prefix, MaxStagedBytes: 10})
	a, _ := sample("ap-000000000001", q)
	a.Artifacts = []record.Artifact{{Name: "a"}, {Name: "b"}}
	_, created, err := s.Park(ctx, a, map[string][]byte{"a": []byte("123456"), "b": []byte("12345")})
	if !errors.Is(err, approve.ErrTooLarge) || created {
		t.Fatalf("Park of 11 bytes with a cap of 10: created %v, %v; want ErrTooLarge", created, err)
	}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys after ErrTooLarge: %q, %v; want none", keys, err)
	}
	// At the cap exactly it is stored, with digests filled in.
	got, created, err := s.Park(ctx, a, map[string][]byte{"a": []byte("12345"), "b": []byte("12345")})
	if err != nil || !created {
		t.Fatalf("Park of 10 bytes: %v", err)
	}
	if got.Artifacts[0].SHA256 != digest([]byte("12345")) || got.Artifacts[0].Bytes != 5 {
		t.Errorf("artifact %+v: want its size and digest filled in", got.Artifacts[0])
	}
}

func TestParkInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb, q := approvetest.Store(t, approve.Options{})
	for name, f := range map[string]func(a *approve.Approval, d map[string][]byte){
		"no id":            func(a *approve.Approval, d map[string][]byte) { a.ID = "" },
		"brace in id":      func(a *approve.Approval, d map[string][]byte) { a.ID = "ap-{x}" },
		"state rejected":   func(a *approve.Approval, d map[string][]byte) { a.State = approve.StateRejected },
		"accepted, no by":  func(a *approve.Approval, d map[string][]byte) { a.State = approve.StateAccepted },
		"pending, decided": func(a *approve.Approval, d map[string][]byte) { a.DecidedBy = "alice" },
		"unknown artifact": func(a *approve.Approval, d map[string][]byte) { d["nope"] = []byte("x") },
		"digest mismatch":  func(a *approve.Approval, d map[string][]byte) { d["out/report.csv"] = []byte("changed") },
		"duplicate name":   func(a *approve.Approval, d map[string][]byte) { a.Artifacts = append(a.Artifacts, a.Artifacts[0]) },
	} {
		a, d := sample("ap-000000000001", q)
		f(a, d)
		if _, _, err := s.Park(ctx, a, d); err == nil {
			t.Errorf("%s: Park succeeded", name)
		}
	}
	if n, _ := rdb.Exists(ctx, s.Keys("ap-000000000001")...).Result(); n != 0 {
		t.Errorf("a refused Park stored %d keys", n)
	}
}

func TestParkAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s, _, q := approvetest.Store(t, approve.Options{Now: clk.Now})
	a, data := sample("ap-000000000001", q)
	a.State, a.DecidedBy = approve.StateAccepted, "policy:default"
	got := park(t, s, a, data)
	if !got.DecidedAt.Equal(clk.Now()) || !got.ExpiresAt.IsZero() {
		t.Errorf("auto-accepted: decided_at %v (want now), expires_at %v (want zero)", got.DecidedAt, got.ExpiresAt)
	}
	h, err := s.History(ctx, a.ID)
	want := []approve.Event{{At: clk.Now(), From: "", To: approve.StateAccepted, By: "policy:default"}}
	if diff := cmp.Diff(want, h); err != nil || diff != "" {
		t.Errorf("History: %v (-want +got):\n%s", err, diff)
	}
	ids, err := s.ListAccepted(ctx, time.Time{})
	if err != nil || !cmp.Equal(ids, []string{a.ID}) {
		t.Errorf("ListAccepted = %q, %v", ids, err)
	}
	// The sweeper's cutoff: an approval decided at the cutoff or after it
	// is not listed, one decided before it is.
	if ids, err := s.ListAccepted(ctx, clk.Now()); err != nil || len(ids) != 0 {
		t.Errorf("ListAccepted(decided before now) = %q, %v; want none", ids, err)
	}
	if ids, err := s.ListAccepted(ctx, clk.Now().Add(time.Microsecond)); err != nil || !cmp.Equal(ids, []string{a.ID}) {
		t.Errorf("ListAccepted(decided before now+1µs) = %q, %v", ids, err)
	}
	if l, _ := s.List(ctx, "", 0); len(l) != 0 {
		t.Errorf("pending list holds %d approvals, want none", len(l))
	}
	if _, err := s.Data(ctx, a.ID, "out/report.csv"); err != nil {
		t.Errorf("staged bytes of an accepted approval not yet promoted: %v", err)
	}
}

func TestConcurrentAccept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, q := approvetest.Store(t, approve.Options{})
	a, data := sample("ap-000000000001", q)
	park(t, s, a, data)

	const n = 20
	var wg sync.WaitGroup
	type outcome struct {
		a   *approve.Approval
		err error
	}
	res := make([]outcome, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var o outcome
			if i%2 == 0 {
				o.a, o.err = s.Accept(ctx, a.ID, fmt.Sprintf("user%d", i), "ok")
			} else {
				o.a, o.err = s.Reject(ctx, a.ID, fmt.Sprintf("user%d", i), "no")
			}
			res[i] = o
		}()
	}
	close(start)
	wg.Wait()
	var winner *approve.Approval
	for i, o := range res {
		if o.err == nil {
			if winner != nil {
				t.Fatalf("two winners: %s and user%d", winner.DecidedBy, i)
			}
			winner = o.a
		}
	}
	if winner == nil {
		t.Fatal("no winner")
	}
	for i, o := range res {
		if o.err == nil {
			continue
		}
		var de *approve.DecidedError
		if !errors.As(o.err, &de) || !errors.Is(o.err, approve.ErrAlreadyDecided) {
			t.Errorf("user%d: %v, want a DecidedError", i, o.err)
			continue
		}
		want := approve.DecidedError{ID: a.ID, State: winner.State, By: winner.DecidedBy, At: winner.DecidedAt}
		if *de != want {
			t.Errorf("user%d: %+v, want %+v", i, *de, want)
		}
		if !strings.Contains(o.err.Error(), winner.DecidedBy) {
			t.Errorf("user%d: %q does not name the winner", i, o.err)
		}
	}
	h, err := s.History(ctx, a.ID)
	if err != nil || len(h) != 2 || h[1].By != winner.DecidedBy {
		t.Errorf("History = %+v, %v; want park and the winner's decision", h, err)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s, _, q := approvetest.Store(t, approve.Options{Now: clk.Now, TTL: time.Hour})
	a, data := sample("ap-000000000001", q)
	p := park(t, s, a, data)
	if want := clk.Now().Add(time.Hour); !p.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", p.ExpiresAt, want)
	}
	clk.Add(time.Hour) // at expires_at exactly: too late
	for _, decide := range []func() (*approve.Approval, error){
		func() (*approve.Approval, error) { return s.Accept(ctx, a.ID, "alice", "") },
		func() (*approve.Approval, error) { return s.Reject(ctx, a.ID, "bob", "no") },
	} {
		_, err := decide()
		var de *approve.DecidedError
		if !errors.As(err, &de) || de.State != approve.StateExpired || !de.At.Equal(p.ExpiresAt) || de.By != "" {
			t.Errorf("decision after expiry: %v, want an expired DecidedError at %v", err, p.ExpiresAt)
		}
	}
	got, err := s.Get(ctx, a.ID)
	if err != nil || got.State != approve.StateExpired || !got.DecidedAt.Equal(p.ExpiresAt) {
		t.Errorf("after expiry: %+v, %v", got, err)
	}
	if _, err := s.Data(ctx, a.ID, "out/report.csv"); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("staged bytes after expiry: %v, want ErrNotFound", err)
	}
	h, _ := s.History(ctx, a.ID)
	want := []approve.Event{
		{At: p.CreatedAt, To: approve.StatePending},
		{At: p.ExpiresAt, From: approve.StatePending, To: approve.StateExpired},
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("History (-want +got):\n%s", diff)
	}
	if l, _ := s.List(ctx, approve.StateExpired, 0); len(l) != 1 {
		t.Errorf("List(expired) = %d, want 1", len(l))
	}
	if l, _ := s.List(ctx, approve.StatePending, 0); len(l) != 0 {
		t.Errorf("List(pending) = %d, want 0", len(l))
	}
	// Just before expiry an accept wins.
	b, data := sample("ap-000000000002", q)
	pb := park(t, s, b, data)
	clk.Add(time.Hour - time.Microsecond)
	if got, err := s.Accept(ctx, b.ID, "alice", ""); err != nil || !got.DecidedAt.Equal(pb.ExpiresAt.Add(-time.Microsecond)) {
		t.Errorf("Accept a microsecond before expiry: %+v, %v", got, err)
	}
}

func TestRejectNeedsComment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, q := approvetest.Store(t, approve.Options{})
	a, data := sample("ap-000000000001", q)
	park(t, s, a, data)
	for _, c := range []string{"", "  \n"} {
		if _, err := s.Reject(ctx, a.ID, "bob", c); !errors.Is(err, approve.ErrCommentRequired) {
			t.Errorf("Reject with comment %q: %v, want ErrCommentRequired", c, err)
		}
	}
	if _, err := s.Accept(ctx, a.ID, "", ""); err == nil {
		t.Error("Accept without by succeeded")
	}
	if got, _ := s.Get(ctx, a.ID); got.State != approve.StatePending {
		t.Fatalf("state %s after refused decisions, want pending", got.State)
	}
	got, err := s.Reject(ctx, a.ID, "bob", "wrong totals")
	if err != nil || got.State != approve.StateRejected || got.DecidedBy != "bob" || got.Comment != "wrong totals" {
		t.Fatalf("Reject = %+v, %v", got, err)
	}
	if _, err := s.Data(ctx, a.ID, "out/report.csv"); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("staged bytes after reject: %v, want ErrNotFound", err)
	}
	_, err = s.Accept(ctx, a.ID, "alice", "")
	if !errors.Is(err, approve.ErrAlreadyDecided) || !strings.Contains(err.Error(), "rejected by bob") {
		t.Errorf("Accept after reject: %v", err)
	}
	if _, err := s.Accept(ctx, "ap-nope", "alice", ""); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("Accept of a missing approval: %v", err)
	}
}

func TestExpireDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s, rdb, q := approvetest.Store(t, approve.Options{Now: clk.Now, TTL: time.Hour})
	for i, ttl := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Hour} {
		a, data := sample(fmt.Sprintf("ap-%012d", i), q)
		a.ExpiresAt = clk.Now().Add(ttl)
		park(t, s, a, data)
	}
	accepted, data := sample("ap-accepted", q)
	accepted.ExpiresAt = clk.Now().Add(time.Minute)
	park(t, s, accepted, data)
	if _, err := s.Accept(ctx, accepted.ID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ExpireDue(ctx); n != 0 || err != nil {
		t.Errorf("ExpireDue before any expiry = %d, %v", n, err)
	}
	clk.Add(time.Hour)
	if n, err := s.ExpireDue(ctx); n != 2 || err != nil {
		t.Errorf("ExpireDue = %d, %v; want 2", n, err)
	}
	if n, err := s.ExpireDue(ctx); n != 0 || err != nil {
		t.Errorf("ExpireDue again = %d, %v; want 0", n, err)
	}
	for i, want := range []approve.State{approve.StateExpired, approve.StateExpired, approve.StatePending} {
		id := fmt.Sprintf("ap-%012d", i)
		a, err := s.Get(ctx, id)
		if err != nil || a.State != want {
			t.Errorf("%s: %v, %v; want %s", id, a, err, want)
		}
		_, err = s.Data(ctx, id, "out/report.csv")
		if (want == approve.StateExpired) != errors.Is(err, approve.ErrNotFound) {
			t.Errorf("%s: staged bytes: %v", id, err)
		}
	}
	if a, _ := s.Get(ctx, accepted.ID); a.State != approve.StateAccepted {
		t.Errorf("accepted approval became %s", a.State)
	}
	l, err := s.List(ctx, approve.StateExpired, 0)
	if err != nil || len(l) != 2 {
		t.Errorf("List(expired) = %d, %v", len(l), err)
	}
	// Stale entries of the expiry index (a wrong score, a decided or a
	// missing approval) are repaired, not expired, and do not stall it.
	key := s.Prefix() + "approvals:expiry"
	for _, id := range []string{"ap-000000000002", accepted.ID, "ap-gone"} {
		rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: id})
	}
	if n, err := s.ExpireDue(ctx); n != 0 || err != nil {
		t.Errorf("ExpireDue with stale entries = %d, %v; want 0", n, err)
	}
	left, _ := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
	want := []redis.Z{{Score: float64(clk.Now().Add(2 * time.Hour).UnixMicro()), Member: "ap-000000000002"}}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("expiry index (-want +got):\n%s", diff)
	}
}

func TestMarkPromoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s, rdb, q := approvetest.Store(t, approve.Options{Now: clk.Now, Retention: time.Hour})
	a, data := sample("ap-000000000001", q)
	park(t, s, a, data)
	if err := s.MarkPromoted(ctx, a.ID, time.Time{}, ""); !errors.Is(err, approve.ErrNotAccepted) {
		t.Errorf("MarkPromoted of a pending approval: %v, want ErrNotAccepted", err)
	}
	if err := s.MarkPromoted(ctx, "ap-nope", time.Time{}, ""); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("MarkPromoted of a missing approval: %v, want ErrNotFound", err)
	}
	clk.Add(time.Minute)
	if _, err := s.Accept(ctx, a.ID, "alice", "looks right"); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := rdb.PTTL(ctx, s.Keys(a.ID)[0]).Result(); ttl != -1 {
		t.Errorf("an accepted approval not yet promoted has a TTL %v", ttl)
	}
	if ids, _ := s.ListAccepted(ctx, time.Time{}); !cmp.Equal(ids, []string{a.ID}) {
		t.Errorf("ListAccepted = %q", ids)
	}
	at := clk.Now().Add(time.Second)
	for i := range 2 {
		if err := s.MarkPromoted(ctx, a.ID, at.Add(time.Duration(i)*time.Hour), "/store/r/t"); err != nil {
			t.Fatalf("MarkPromoted #%d: %v", i+1, err)
		}
	}
	got, _ := s.Get(ctx, a.ID)
	if !got.PromotedAt.Equal(at) || got.State != approve.StateAccepted || got.PublishedTo != "/store/r/t" {
		t.Errorf("after MarkPromoted twice: state %s, promoted_at %v, published_to %q; want accepted, %v, /store/r/t", got.State, got.PromotedAt, got.PublishedTo, at)
	}
	if ids, err := s.ListAccepted(ctx, time.Time{}); err != nil || len(ids) != 0 {
		t.Errorf("ListAccepted = %q, %v; want none", ids, err)
	}
	if _, err := s.Data(ctx, a.ID, "out/report.csv"); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("staged bytes after promotion: %v", err)
	}
	if l, _ := s.List(ctx, approve.StateAccepted, 0); len(l) != 1 || !l[0].PromotedAt.Equal(at) {
		t.Errorf("List(accepted) = %+v", l)
	}
	// History holds every transition, in order.
	h, err := s.History(ctx, a.ID)
	want := []approve.Event{
		{At: newClock().Now(), To: approve.StatePending},
		{At: newClock().Now().Add(time.Minute), From: approve.StatePending, To: approve.StateAccepted, By: "alice", Comment: "looks right"},
		{At: at, From: approve.StateAccepted, To: approve.EventPromoted},
	}
	if diff := cmp.Diff(want, h); err != nil || diff != "" {
		t.Errorf("History: %v (-want +got):\n%s", err, diff)
	}
	// A promoted approval is kept for Retention, then deleted by Redis.
	for _, k := range s.Keys(a.ID) {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if k == s.Keys(a.ID)[1] {
			if ttl != -2 {
				t.Errorf("%s: PTTL %v, want no key", k, ttl)
			}
			continue
		}
		if err != nil || ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: PTTL %v, %v; want up to 1h", k, ttl, err)
		}
	}
}

// TestWriteAhead checks that an accept in flight (its unpromoted index
// entry written, its script not run yet) is neither listed nor dropped, and
// that stale entries are dropped.
func TestListAcceptedStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb, q := approvetest.Store(t, approve.Options{})
	pending, data := sample("ap-pending", q)
	park(t, s, pending, data)
	rejected, data := sample("ap-rejected", q)
	park(t, s, rejected, data)
	if _, err := s.Reject(ctx, rejected.ID, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	key := s.Prefix() + "approvals:unpromoted"
	for _, id := range []string{"ap-pending", "ap-rejected", "ap-gone"} {
		rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: id})
	}
	ids, err := s.ListAccepted(ctx, time.Time{})
	if err != nil || len(ids) != 0 {
		t.Errorf("ListAccepted = %q, %v; want none", ids, err)
	}
	left, _ := rdb.ZRange(ctx, key, 0, -1).Result()
	if !cmp.Equal(left, []string{"ap-pending"}) {
		t.Errorf("unpromoted index holds %q, want only the pending one (an accept in flight)", left)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	s, rdb, q := approvetest.Store(t, approve.Options{Now: clk.Now})
	var ids []string
	for i := range 6 {
		a, data := sample(fmt.Sprintf("ap-%012d", i), q)
		a.CreatedAt = clk.Now().Add(time.Duration(i) * time.Minute)
		park(t, s, a, data)
		ids = append(ids, a.ID)
	}
	past, data := sample("ap-past", q)
	past.ExpiresAt = clk.Now().Add(-time.Second)
	park(t, s, past, data)
	clk.Add(time.Hour)
	if _, err := s.Accept(ctx, ids[1], "alice", ""); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if _, err := s.Reject(ctx, ids[4], "bob", "no"); err != nil {
		t.Fatal(err)
	}
	// A stale index entry: accepted, still in the pending index.
	rdb.ZAdd(ctx, s.Prefix()+"approvals:pending", redis.Z{Score: 1e18, Member: ids[1]})

	listIDs := func(state approve.State, limit int) []string {
		t.Helper()
		l, err := s.List(ctx, state, limit)
		if err != nil {
			t.Fatalf("List(%q, %d): %v", state, limit, err)
		}
		out := []string{}
		for _, a := range l {
			if a.Result != nil || a.Artifacts != nil || a.Run.Steps != nil {
				t.Errorf("List returned more than the summary: %+v", a)
			}
			out = append(out, a.ID)
		}
		return out
	}
	for _, tc := range []struct {
		state approve.State
		limit int
		want  []string
	}{
		{"", 0, []string{ids[5], ids[3], ids[2], ids[0]}},
		{approve.StatePending, 2, []string{ids[5], ids[3]}},
		{approve.StatePending, 3, []string{ids[5], ids[3], ids[2]}},
		{approve.StateAccepted, 0, []string{ids[1]}},
		{approve.StateRejected, 10, []string{ids[4]}},
		{approve.StateExpired, 0, []string{}},
		{approve.StateAll, 3, []string{ids[5], ids[4], ids[3]}},
	} {
		if diff := cmp.Diff(tc.want, listIDs(tc.state, tc.limit)); diff != "" {
			t.Errorf("List(%q, %d) (-want +got):\n%s", tc.state, tc.limit, diff)
		}
	}
	if n, _ := rdb.ZScore(ctx, s.Prefix()+"approvals:pending", ids[1]).Result(); n != 0 {
		t.Errorf("the stale pending entry was not dropped")
	}
	l, _ := s.List(ctx, "", 1)
	if a := l[0]; a.Run.Queue != q || a.RunID != "run-"+ids[5] || len(a.Reasons) != 2 || a.CreatedAt.IsZero() || a.Run.Action != "report" {
		t.Errorf("List's summary: %+v", a)
	}
	if _, err := s.List(ctx, "bogus", 0); err == nil {
		t.Error("List of an unknown state succeeded")
	}
}

// slot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag
// (the first {…} with something inside), or of the whole key, mod 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestKeysShareASlot(t *testing.T) {
	t.Parallel()
	// Known slots (CLUSTER KEYSLOT).
	for key, want := range map[string]uint16{"foo": 12182, "123456789": 0x31c3 % 16384, "{user1000}.following": 3443, "{user1000}.followers": 3443} {
		if got := slot(key); got != want {
			t.Fatalf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	ctx := context.Background()
	s, rdb, q := approvetest.Store(t, approve.Options{})
	a, data := sample("ap-000000000001", q)
	park(t, s, a, data)
	keys, err := rdb.Keys(ctx, s.Prefix()+"approval:*").Result()
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys of one approval: %q, %v; want its hash, data and audit", keys, err)
	}
	want := slot("ap-000000000001")
	for _, k := range keys {
		if got := slot(k); got != want {
			t.Errorf("key %s in slot %d, want %d", k, got, want)
		}
	}
}

func TestWatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _, q := approvetest.Store(t, approve.Options{})
	before, data := sample("ap-before", q)
	park(t, s, before, data)

	got := make(chan *approve.Approval, 10)
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		close(ready)
		done <- s.Watch(ctx, "", func(a *approve.Approval) error { got <- a; return nil })
	}()
	<-ready
	// Park sentinels until Watch reports one: it then reads the stream.
	for i := 0; ; i++ {
		a, data := sample(fmt.Sprintf("ap-sentinel-%d", i), q)
		park(t, s, a, data)
		select {
		case <-got:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	time.Sleep(100 * time.Millisecond)
	for len(got) > 0 { // later sentinels
		<-got
	}
	auto, data := sample("ap-auto", q)
	auto.State, auto.DecidedBy = approve.StateAccepted, "policy:default"
	park(t, s, auto, data)
	for _, id := range []string{"ap-1", "ap-2"} {
		a, data := sample(id, q)
		park(t, s, a, data)
	}
	for _, want := range []string{"ap-1", "ap-2"} {
		select {
		case a := <-got:
			if a.ID != want || a.State != approve.StatePending || len(a.Artifacts) != 1 {
				t.Errorf("Watch gave %+v, want %s", a, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Watch did not report %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return when its context ended")
	}
	if len(got) != 0 {
		t.Errorf("Watch reported more: %v", (<-got).ID)
	}

	// From the start of the stream, with an error from fn.
	stop := errors.New("stop")
	var seen []string
	err := s.Watch(context.Background(), "0-0", func(a *approve.Approval) error {
		seen = append(seen, a.ID)
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !cmp.Equal(seen, []string{"ap-before", "ap-sentinel-0"}) {
		t.Errorf("Watch from 0-0: %q, %v", seen, err)
	}
}

// BenchmarkList10000 lists 10,000 pending approvals.
func BenchmarkList10000(b *testing.B) {
	ctx := context.Background()
	s, _, q := approvetest.Store(b, approve.Options{})
	const n = 10000
	// Park through pipelines (setup, outside the timer).
	start := time.Now().Add(-time.Hour)
	for lo := 0; lo < n; lo += 1000 {
		var as []*approve.Approval
		for i := lo; i < lo+1000; i++ {
			a, _ := sample(fmt.Sprintf("ap-%012x", i), q)
			a.CreatedAt = start.Add(time.Duration(i) * time.Millisecond)
			a.Reasons = []string{"approval: always", "artifacts matched out/*.csv"}
			as = append(as, a)
		}
		if err := s.ParkMany(ctx, as); err != nil {
			b.Fatal(err)
		}
	}
	if l, err := s.List(ctx, "", 0); err != nil || len(l) != n {
		b.Fatalf("List = %d approvals, %v; want %d", len(l), err, n)
	}
	b.ResetTimer()
	for b.Loop() {
		l, err := s.List(ctx, "", 0)
		if err != nil || len(l) != n {
			b.Fatalf("List = %d approvals, %v", len(l), err)
		}
	}
}

// TestPlainStrings checks List's fast decoder of reasons against
// encoding/json: same result, or a refusal (json.Unmarshal then decodes).
func TestPlainStrings(t *testing.T) {
	t.Parallel()
	for _, in := range [][]string{
		nil, {}, {""}, {"a"}, {"a", "b"}, {`a","b`}, {"<tag> & 漢字"}, {"tab\there", "\xff"}, {",", "[", "]"},
	} {
		b, _ := json.Marshal(in)
		got, ok := approve.PlainStrings(string(b))
		var want []string
		_ = json.Unmarshal(b, &want)
		if ok && !cmp.Equal(got, want) {
			t.Errorf("PlainStrings(%s) = %q, want %q", b, got, want)
		}
	}
	for _, bad := range []string{`["a",]`, `["a" ]`, `[`, `["a]`, `[1]`, `["a"]x`, `x`} {
		if got, ok := approve.PlainStrings(bad); ok {
			t.Errorf("PlainStrings(%s) = %q, true; want a refusal", bad, got)
		}
	}
}
