//go:build linux

package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// clientOrder is the order clients are listed in.
var clientOrder = []string{"client", "api", "baseline", "worker"}

// client names the process at addr by its client name.
func (o *opsRun) client(addr string) string {
	if addr == "lua" {
		return "lua"
	}
	if n, ok := o.names[addr]; ok {
		return n
	}
	return "unnamed"
}

// scriptLabel names a script by its source, or its sha1's start.
func (o *opsRun) scriptLabel(sha string) string {
	if sha == "" || strings.HasPrefix(sha, "fcall:") {
		return sha
	}
	if name := scriptName(o.bodies[sha], o.lits); name != "" {
		return name
	}
	return "sha " + sha[:min(8, len(sha))]
}

// fill computes a row's figures from the metered pass (idleA, winA) and
// the MONITOR pass (idleB, winB).
func (o *opsRun) fill(row *RedisRow, idleA, winA opsDelta, idleB, winB *opSegment) {
	n := o.n
	sum := func(m map[string]float64) float64 {
		t := 0.0
		for _, v := range m {
			t += v
		}
		return t
	}
	row.WindowS = winA.secs
	row.Executed = newFig(sum(winA.calls), winA.secs, sum(idleA.calls), idleA.secs, n)
	row.CommandUSSum = newFig(sum(winA.usec), winA.secs, sum(idleA.usec), idleA.secs, n)
	row.CommandUS = newFig(o.topUS(winA, winB), winA.secs, o.topUS(idleA, idleB), idleA.secs, n)
	row.CPUUS = newFig(winA.cpuUS, winA.secs, idleA.cpuUS, idleA.secs, n)
	row.ExecutedBy = map[string]float64{}
	for cmd, c := range winA.calls {
		row.ExecutedBy[cmd] = c / float64(n)
	}
	sent, exec := o.monCounts(winB)
	isent, iexec := o.monCounts(idleB)
	row.Sent = newFig(sent, winB.seconds(), isent, idleB.seconds(), n)
	row.ExecutedMonitor = newFig(exec, winB.seconds(), iexec, idleB.seconds(), n)
	row.Commands = o.breakdown(winB, idleB)
}

// monCounts is what a segment shows of every client but the meter: the
// commands sent, and those with the scripts' own.
func (o *opsRun) monCounts(seg *opSegment) (sent, exec float64) {
	for k, c := range seg.ops {
		if o.client(k.addr) == "meter" {
			continue
		}
		exec += float64(c)
		if !k.inner {
			sent += float64(c)
		}
	}
	return sent, exec
}

// topUS is d's command µs with each command's µs scaled by the share of
// its calls that no script made (seg's, from MONITOR): a script's call
// already holds the time of the commands it runs.
func (o *opsRun) topUS(d opsDelta, seg *opSegment) float64 {
	inner, all := map[string]float64{}, map[string]float64{}
	for k, c := range seg.ops {
		if o.client(k.addr) == "meter" {
			continue
		}
		all[k.cmd] += float64(c)
		if k.inner {
			inner[k.cmd] += float64(c)
		}
	}
	t := 0.0
	for cmd, us := range d.usec {
		share := 0.0
		if all[cmd] > 0 {
			share = inner[cmd] / all[cmd]
		}
		t += us * (1 - share)
	}
	return t
}

// breakdown is the window's commands by client, command and script, per
// run, with their idle rate, and each script's own commands.
func (o *opsRun) breakdown(win, idle *opSegment) []RedisCmd {
	type key struct{ client, cmd, script string }
	calls, idles := map[key]float64{}, map[key]float64{}
	inner := map[[2]string]map[string]float64{}
	for k, c := range win.ops {
		cl := o.client(k.addr)
		if cl == "meter" {
			continue
		}
		if k.inner {
			ik := [2]string{cl, k.script}
			if inner[ik] == nil {
				inner[ik] = map[string]float64{}
			}
			inner[ik][k.cmd] += float64(c)
			continue
		}
		calls[key{cl, k.cmd, k.script}] += float64(c)
	}
	for k, c := range idle.ops {
		if cl := o.client(k.addr); cl != "meter" && !k.inner {
			idles[key{cl, k.cmd, k.script}] += float64(c)
		}
	}
	keys := map[key]bool{}
	for k := range calls {
		keys[k] = true
	}
	for k := range idles {
		keys[k] = true
	}
	// A script's own commands go to its most frequent call.
	owner := map[[2]string]key{}
	for k := range keys {
		ik := [2]string{k.client, k.script}
		if _, ok := inner[ik]; ok && k.script != "" {
			if cur, ok := owner[ik]; !ok || calls[k] > calls[cur] || (calls[k] == calls[cur] && k.cmd < cur.cmd) {
				owner[ik] = k
			}
		}
	}
	for ik := range inner {
		if _, ok := owner[ik]; !ok {
			k := key{ik[0], "(script)", ik[1]}
			keys[k], owner[ik] = true, k
		}
	}
	var out []RedisCmd
	for k := range keys {
		c := RedisCmd{Client: k.client, Command: k.cmd, Script: o.scriptLabel(k.script), PerRun: calls[k] / float64(o.n)}
		if s := idle.seconds(); s > 0 {
			c.IdlePerS = idles[k] / s
		}
		if ik := [2]string{k.client, k.script}; owner[ik] == k {
			c.Inner = map[string]float64{}
			for cmd, v := range inner[ik] {
				c.Inner[cmd] = v / float64(o.n)
				c.InnerPerRun += v / float64(o.n)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b RedisCmd) int {
		return cmp.Or(cmp.Compare(clientRank(a.Client), clientRank(b.Client)), cmp.Compare(a.Client, b.Client),
			cmp.Compare(b.PerRun, a.PerRun), cmp.Compare(a.Command, b.Command), cmp.Compare(a.Script, b.Script))
	})
	return out
}

func clientRank(c string) int {
	if i := slices.Index(clientOrder, c); i >= 0 {
		return i
	}
	return len(clientOrder)
}

// redisTable is the redis section's table and breakdown.
func redisTable(r *RedisReport) string {
	if r == nil || len(r.Rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nWhat one run costs Redis: a private redis-server %s, %d runs per path one at a time (enqueue → run → record)\n", r.Redis, r.Runs)
	fmt.Fprintf(&b, "per run, net of the servers' idle background measured for %.0f s before (raw per run in parentheses)\n", r.IdleS)
	t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "path\texecuted\tsent\tcommand µs\tRedis CPU µs\tidle/s: executed\tsent\tCPU µs\t")
	for _, row := range r.Rows {
		c := func(f RedisFig) string { return fmt.Sprintf("%.1f (%.1f)", f.Net, f.Raw) }
		us := func(f RedisFig) string { return fmt.Sprintf("%.0f (%.0f)", f.Net, f.Raw) }
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%.0f\t\n", row.Path, c(row.Executed), c(row.Sent), us(row.CommandUS), us(row.CPUUS),
			row.Executed.IdlePerS, row.Sent.IdlePerS, row.CPUUS.IdlePerS)
	}
	_ = t.Flush()
	fmt.Fprintln(&b, "  executed: the calls of INFO commandstats, a script's own commands included; sent: MONITOR's lines but [lua], a script call one;")
	fmt.Fprintln(&b, "  command µs: commandstats usec, a script's commands counted once (in its call); Redis CPU: used_cpu_user+sys;")
	fmt.Fprintln(&b, "  the bench's meter (INFO, and for bare asynq one XREAD per run to learn the run ended) is left out, but for its I/O in CPU;")
	fmt.Fprintln(&b, "  bare asynq's xadd is the bench baseline's event (for that XREAD), which a bare asynq server would not send")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "  %s: %s\n", row.Path, row.How)
	}
	fmt.Fprintln(&b, "Who sends what, calls per run by client name (MONITOR pass, raw); a script by its source's name, +k: the commands it ran inside Redis per run")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "  %s\n", row.Path)
		for _, line := range breakdownLines(row.Commands, false) {
			fmt.Fprintf(&b, "    %s\n", line)
		}
		if idle := breakdownLines(row.Commands, true); len(idle) > 0 {
			fmt.Fprintf(&b, "    idle, per s: %s\n", strings.Join(idle, "; "))
		}
	}
	return b.String()
}

// breakdownLines is one line per client: its commands per run (or, with
// idle, per idle second), scripts' calls by script.
func breakdownLines(cmds []RedisCmd, idle bool) []string {
	val := func(c RedisCmd) float64 {
		if idle {
			return c.IdlePerS
		}
		return c.PerRun
	}
	floor := map[bool]float64{false: 0.05, true: 0.1}[idle]
	var lines []string
	for i := 0; i < len(cmds); {
		j := i
		for j < len(cmds) && cmds[j].Client == cmds[i].Client {
			j++
		}
		type item struct {
			cmd    string
			total  float64
			detail []string
		}
		var items []*item
		byCmd := map[string]*item{}
		for _, c := range cmds[i:j] {
			v := val(c)
			if v < floor && (idle || c.InnerPerRun < floor) {
				continue
			}
			it := byCmd[c.Command]
			if it == nil {
				it = &item{cmd: c.Command}
				byCmd[c.Command] = it
				items = append(items, it)
			}
			it.total += v
			if c.Script != "" {
				d := c.Script + " " + compact(v)
				if !idle && c.InnerPerRun > 0 {
					d += " +" + compact(c.InnerPerRun)
				}
				it.detail = append(it.detail, d)
			}
		}
		slices.SortStableFunc(items, func(a, b *item) int { return cmp.Compare(b.total, a.total) })
		var parts []string
		for _, it := range items {
			p := it.cmd + " " + compact(it.total)
			if len(it.detail) > 0 {
				p += " (" + strings.Join(it.detail, ", ") + ")"
			}
			parts = append(parts, p)
		}
		if len(parts) > 0 {
			sep := ": "
			if idle {
				sep = " "
			}
			lines = append(lines, cmds[i].Client+sep+strings.Join(parts, ", "))
		}
		i = j
	}
	return lines
}

// compact formats a count per run: at most two decimals, no trailing zero.
func compact(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}
