package queuepolicy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/policy"
)

// TestPublishLoadGrants: each queue gets the grants that name it, with
// their env and hosts only; a queue no grant names gets an empty list
// (it grants nothing), one no worker published for gets none.
func TestPublishLoadGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q1, q2, unpublished := redistest.Queue(t), redistest.Queue(t), redistest.Queue(t)
	p, err := policy.Parse([]byte(`secrets:
  PARTNER_TOKEN: {queues: [`+q1+`], actions: [csv-report], hosts: [partner.example]}
  API_KEY: {queues: [`+q1+`, other], env: true}
  ACTION_ONLY: {actions: [csv-report], hosts: [x.example]}
`), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := queuepolicy.PublishGrants(ctx, rdb, "", []string{q1, q2}, p.Grants()); err != nil {
		t.Fatal(err)
	}
	want := queuepolicy.Grants{Secrets: []policy.Grant{
		{Name: "API_KEY", Env: true},
		{Name: "PARTNER_TOKEN", Hosts: []string{"partner.example"}},
	}}
	got, ok, err := queuepolicy.LoadGrants(ctx, rdb, "", q1)
	if err != nil || !ok {
		t.Fatalf("LoadGrants(q1) = _, %v, %v", ok, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadGrants(q1) (-want +got):\n%s", diff)
	}
	if g, ok := got.Grant("PARTNER_TOKEN"); !ok || g.Hosts[0] != "partner.example" {
		t.Errorf("Grant(PARTNER_TOKEN) = %+v, %v", g, ok)
	}
	if _, ok := got.Grant("ACTION_ONLY"); ok {
		t.Error("a grant to an action only was published for a queue")
	}
	raw := rdb.Get(ctx, queuepolicy.GrantsKey("", q1)).Val()
	if strings.Contains(raw, "csv-report") || strings.Contains(raw, "other") {
		t.Errorf("published more than names, env and hosts: %s", raw)
	}
	got, ok, err = queuepolicy.LoadGrants(ctx, rdb, "", q2)
	if err != nil || !ok || got.Secrets == nil || len(got.Secrets) != 0 {
		t.Errorf("LoadGrants(q2) = %+v, %v, %v; want an empty list", got, ok, err)
	}
	if _, ok, err := queuepolicy.LoadGrants(ctx, rdb, "", unpublished); ok || err != nil {
		t.Errorf("LoadGrants of a queue nothing was published for: %v, %v", ok, err)
	}
}

// TestLoadGrantsBad: a value that is not grants, or larger than a worker
// publishes, is an error naming the key.
func TestLoadGrantsBad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	key := queuepolicy.GrantsKey("", q)
	for _, v := range []string{"not json", `{"secrets": "x"}`, `{}`, `{"secrets": [` + strings.Repeat(`{"name": "A_KEY"},`, 20000) + `{"name": "B"}]}`} {
		if err := rdb.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, ok, err := queuepolicy.LoadGrants(ctx, rdb, "", q)
		if ok || err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("LoadGrants of %.40q: %v, %v", v, ok, err)
		}
	}
	if got, want := queuepolicy.GrantsKey("team-a:", "reports"), "team-a:grants:reports"; got != want {
		t.Errorf("GrantsKey = %q, want %q", got, want)
	}
}
