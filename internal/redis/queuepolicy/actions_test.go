package queuepolicy_test

import (
	"context"
	"testing"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/limits"
)

// TestPublishLoad: a worker's catalog read back as published, for each of
// its queues; nothing published reads as not published; an empty catalog
// reads as published and empty; a key that holds no catalog is an error
// naming it.
func TestPublishLoadActions(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	q1, q2, none := redistest.Queue(t), redistest.Queue(t), redistest.Queue(t)
	c, err := actions.LoadDir("../../../examples/csv-report/actions", limits.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if err := queuepolicy.PublishActions(ctx, rdb, "", []string{q1, q2}, c.Infos()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{q1, q2} {
		infos, ok, err := queuepolicy.LoadActions(ctx, rdb, "", q)
		if err != nil || !ok || len(infos) != 1 || infos[0].Digest != c.Infos()[0].Digest {
			t.Errorf("queue %s: %+v %v %v", q, infos, ok, err)
		}
		if _, found := actions.Find(infos, "csv-report"); !found {
			t.Errorf("queue %s: csv-report not found", q)
		}
	}
	if infos, ok, err := queuepolicy.LoadActions(ctx, rdb, "", none); err != nil || ok || infos != nil {
		t.Errorf("nothing published: %+v %v %v", infos, ok, err)
	}
	if err := queuepolicy.PublishActions(ctx, rdb, "", []string{q2}, nil); err != nil {
		t.Fatal(err)
	}
	if infos, ok, err := queuepolicy.LoadActions(ctx, rdb, "", q2); err != nil || !ok || len(infos) != 0 {
		t.Errorf("an empty catalog: %+v %v %v", infos, ok, err)
	}
	if err := rdb.Set(ctx, queuepolicy.ActionsKey("", q1), "not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := queuepolicy.LoadActions(ctx, rdb, "", q1); err == nil {
		t.Error("a key that holds no catalog loaded")
	}
}
