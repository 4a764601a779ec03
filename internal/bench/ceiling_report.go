//go:build linux

package bench

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// ceilingTable is the ceiling section's text, "" without one.
func ceilingTable(r *CeilingReport) string {
	if r == nil || len(r.Rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nCeiling of one Redis for a fleet: %d Airlock workers × concurrency %d on a private redis-server %s (no persistence), then on a private 3-shard Redis Cluster\n",
		r.Workers, r.Concurrency, r.Redis)
	fmt.Fprintf(&b, "fed by %d goroutines with Client.Enqueue (runs kept queued ahead: %s; principals: %s); %.0f s warm-up, then a %.0f s window per kind;\n",
		r.Producers, r.Ahead, r.Principals, r.WarmupS, r.WindowS)
	fmt.Fprintln(&b, "after it, the queues drained and every run's record read: enqueued = records ok (verdict ok, state completed or promoted), none failed")
	t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "topology\tkind\truns/s\tRedis CPU, % of a core\tcommands/s\tcommands/run\tRedis CPU µs/run\truns/s per Redis core\tat busiest node saturated\tworkers CPU\tbench CPU\tmachine busy\tenqueued = ok\t")
	for _, row := range r.Rows {
		if row.Error != "" {
			fmt.Fprintf(t, "%s\t%s\tfailed: %s\t\t\t\t\t\t\t\t\t\t\t\n", row.Topology, row.Kind, firstLine(row.Error))
			continue
		}
		others := ""
		if row.Others > 0 {
			others = fmt.Sprintf(" (+%d promote tasks)", row.Others)
		}
		fmt.Fprintf(t, "%s\t%s\t%.1f\t%.1f (INFO %.1f)\t%.0f (calls %.0f)\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f%%\t%.0f%%\t%.0f%%\t%d = %d%s\t\n",
			row.Topology, row.Kind, row.RunsPerS, row.RedisCPUPct, row.INFOCPUPct, row.CommandsPerS, row.CallsPerS,
			row.CommandsPerRun, row.RedisCPUUSPerRn, row.RunsPerCore, row.HottestCeiling,
			row.WorkersCPUPct, row.BenchCPUPct, row.MachineBusyPct, row.Enqueued, row.Verified, others)
	}
	t.Flush()
	var cluster []CeilingRow
	for _, row := range r.Rows {
		if len(row.Nodes) > 1 && row.Error == "" {
			cluster = append(cluster, row)
		}
	}
	if len(cluster) > 0 {
		fmt.Fprintln(&b, "  per node of the cluster (each owns the slot of one queue, served by its share of the workers):")
		workers := map[string]int{}
		if r.Cluster != nil {
			for _, q := range r.Cluster.Queues {
				workers[q.Node] = q.Workers
			}
		}
		t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(t, "  kind\tnode\tqueue\tits workers\tCPU, % of a core\tshare of Redis CPU\tcommands/s\t")
		for _, row := range cluster {
			for _, n := range row.Nodes {
				fmt.Fprintf(t, "  %s\t%s\t%s\t%d\t%.1f\t%.0f%%\t%.0f\t\n", row.Kind, n.Addr, n.Queue, workers[n.Addr], n.CPUPct, 100*n.CPUShare, n.CommandsPerS)
			}
		}
		t.Flush()
	}
	if c := r.Cluster; c != nil && len(c.Global) > 0 {
		fmt.Fprintln(&b, "  keys without a {hash tag} on each node after the runs (one slot each, shared by every queue):")
		var addrs []string
		for a := range c.Global {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		for _, a := range addrs {
			ks := c.Global[a]
			if len(ks) == 0 {
				ks = []string{"none"}
			}
			fmt.Fprintf(&b, "    %s (%d keys in all): %s\n", a, c.Keys[a], strings.Join(ks, " "))
		}
	}
	for _, row := range r.Rows {
		if len(row.TopCommands) == 0 {
			continue
		}
		type kv struct {
			c string
			v float64
		}
		var top []kv
		for c, v := range row.TopCommands {
			top = append(top, kv{c, v})
		}
		slices.SortFunc(top, func(x, y kv) int {
			if x.v > y.v {
				return -1
			}
			if x.v < y.v {
				return 1
			}
			return strings.Compare(x.c, y.c)
		})
		var parts []string
		for _, t := range top {
			parts = append(parts, fmt.Sprintf("%s %.1f", t.c, t.v))
		}
		fmt.Fprintf(&b, "  commandstats per run, %s %s: %s\n", row.Topology, row.Kind, strings.Join(parts, ", "))
	}
	fmt.Fprintln(&b, "  runs/s per Redis core = runs/s ÷ (Redis CPU ÷ 100): a linear extrapolation from a Redis far from saturated (a busier Redis batches more per")
	fmt.Fprintln(&b, "  wake-up, so it is likely conservative); at busiest node saturated = runs/s ÷ the busiest node's CPU fraction, where a cluster stops scaling.")
	fmt.Fprintln(&b, "  Redis CPU from /proc/<pid>/stat (INFO used_cpu_* in brackets); commands/s = INFO total_commands_processed, which counts a script's own commands,")
	fmt.Fprintln(&b, "  as do commandstats calls; both include the harness's polling of the counters (one MGET per queue every 10 ms). workers CPU = their process trees")
	fmt.Fprintln(&b, "  (servers, slot helpers, steps) and bench CPU = the enqueuers, both % of one core; machine busy = % of all cores.")
	return b.String()
}
