package queuepolicy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/limits"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

func TestKey(t *testing.T) {
	if got, want := queuepolicy.Key("", "reports"), "airlock:policy:reports"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := queuepolicy.Key("team-a:", "reports"), "team-a:policy:reports"; got != want {
		t.Errorf("Key with a prefix = %q, want %q", got, want)
	}
}

func TestPublishLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q1, q2, none := redistest.Queue(t), redistest.Queue(t), redistest.Queue(t)

	p := limits.DefaultPolicy()
	p.Max.Memory = 1 << 30
	p.MaxTimeout = limits.Duration(5 * time.Minute)
	p.AllowNetwork = true
	if err := queuepolicy.Publish(ctx, rdb, "", []string{q1, q2}, p); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{q1, q2} {
		got, ok, err := queuepolicy.Load(ctx, rdb, "", q)
		if err != nil || !ok {
			t.Fatalf("Load(%s) = _, %v, %v; want the published policy", q, ok, err)
		}
		if diff := cmp.Diff(p, got); diff != "" {
			t.Errorf("Load(%s) (-want +got):\n%s", q, diff)
		}
		if ttl := rdb.TTL(ctx, queuepolicy.Key("", q)).Val(); ttl != -1 {
			t.Errorf("TTL of %s = %v, want none", queuepolicy.Key("", q), ttl)
		}
	}

	// The last worker to publish wins.
	later := limits.DefaultPolicy()
	if err := queuepolicy.Publish(ctx, rdb, "", []string{q1}, later); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := queuepolicy.Load(ctx, rdb, "", q1); !cmp.Equal(later, got) {
		t.Errorf("Load after a second Publish = %+v, want the later policy", got)
	}

	got, ok, err := queuepolicy.Load(ctx, rdb, "", none)
	if err != nil || ok || !cmp.Equal(limits.Policy{}, got) {
		t.Errorf("Load of a queue without policy = %+v, %v, %v; want zero, false, nil", got, ok, err)
	}
}

func TestPublishRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	if err := queuepolicy.Publish(ctx, rdb, "", nil, limits.DefaultPolicy()); err == nil {
		t.Error("Publish to no queue: no error")
	}
	bad := limits.DefaultPolicy()
	bad.Default.Memory = bad.Max.Memory + 1
	err := queuepolicy.Publish(ctx, rdb, "", []string{q}, bad)
	if err == nil || !strings.Contains(err.Error(), "default.memory") {
		t.Errorf("Publish of an incoherent policy: err = %v, want one naming default.memory", err)
	}
	if n := rdb.Exists(ctx, queuepolicy.Key("", q)).Val(); n != 0 {
		t.Errorf("an incoherent policy was published")
	}
}

func TestLoadBad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	for name, value := range map[string]string{
		"not JSON":   "{",
		"incoherent": `{"max":{"memory":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			q := redistest.Queue(t)
			if err := rdb.Set(ctx, queuepolicy.Key("", q), value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			_, ok, err := queuepolicy.Load(ctx, rdb, "", q)
			if err == nil || ok || !strings.Contains(err.Error(), queuepolicy.Key("", q)) {
				t.Errorf("Load = _, %v, %v; want an error naming the key", ok, err)
			}
		})
	}
}
