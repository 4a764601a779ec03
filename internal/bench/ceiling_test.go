//go:build linux

package bench

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCeilingSection runs the ceiling section alone at a tiny size (2 s
// windows, 2 workers; 3 on the cluster): every run is verified, every
// figure positive, the cluster's load on its three nodes. It asserts no
// speed.
func TestCeilingSection(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real workers and redis-servers for ~30s; not with -short")
	}
	for _, p := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed", p)
		}
	}
	rep, table := runTiny(t, 3*time.Minute, []string{SecCeiling})
	c := rep.Ceiling
	want := 2 * 2
	if !outputSupport {
		want = 2
	}
	if c == nil || len(c.Rows) != want || c.Redis == "" {
		t.Fatalf("ceiling report: %+v", c)
	}
	for _, r := range c.Rows {
		if r.Error != "" {
			t.Errorf("%s %s: %s", r.Topology, r.Kind, r.Error)
			continue
		}
		if r.RunsPerS <= 0 || r.RedisCPUPct <= 0 || r.CommandsPerS <= 0 || r.CommandsPerRun <= 0 || r.RunsPerCore <= 0 ||
			r.WorkersCPUPct <= 0 || r.Enqueued <= 0 || r.Verified != r.Enqueued {
			t.Errorf("%s %s: %+v", r.Topology, r.Kind, r)
		}
		nodes := 1
		if r.Topology == "cluster-3" {
			nodes = 3
		}
		if len(r.Nodes) != nodes {
			t.Errorf("%s %s: %d nodes", r.Topology, r.Kind, len(r.Nodes))
		}
		for _, n := range r.Nodes {
			if n.CommandsPerS <= 0 || n.Queue == "" {
				t.Errorf("%s %s node %+v", r.Topology, r.Kind, n)
			}
		}
	}
	if c.Cluster == nil || len(c.Cluster.Queues) != 3 {
		t.Errorf("cluster layout: %+v", c.Cluster)
	}
	for _, s := range []string{"Ceiling of one Redis for a fleet", "runs/s per Redis core", "per node of the cluster"} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q", s)
		}
	}
}

func TestMachineTicks(t *testing.T) {
	busy, all := machineTicks()
	if all == 0 || busy > all {
		t.Errorf("machineTicks: busy %d, all %d", busy, all)
	}
}
