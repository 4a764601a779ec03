//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/record"
)

// idleMaxRate is what an idle worker with its default flags on one queue
// may cost Redis, in commands per second, the commands Lua scripts run
// inside counted (every line of INFO commandstats). Measured: 3.7
// (docs/deployment.md, Idle cost and latency).
const idleMaxRate = 5.0

// idleWindow is how long TestIdleRedisCommands counts the commands of its
// periodic work: a multiple of every period but a minute's (the idle wait,
// 2s; asynq's heartbeat and forwarder, 5s; the approvals sweeper, the
// worker's announcement and its fair-share sweep, 10s).
const idleWindow = 20 * time.Second

// TestIdleRedisCommands runs the real worker, with its default flags on
// one queue, against a redis-server of its own and holds it to
// idleMaxRate. A whole minute is too long a test: the commands of periodic
// work that comes at least every 10s are counted over idleWindow, from
// half a second after the worker started (between two runs of each, so
// that each runs a whole number of times in it); the work that comes once
// a minute (asynq's recoverer, the sweeper's prune of the approval
// indexes, the announcement's removal of stale entries) runs at the
// worker's start and not again within the window, so its commands are
// counted from the start, by MONITOR, and spread over its minute. asynq's
// janitor (every 8s) and the subscriptions' health checks (3s and 30s)
// fall in the window 2, 6 and 0 times: a slight undercount, against the
// loading of scripts at their first run, a slight overcount.
func TestIdleRedisCommands(t *testing.T) {
	t.Parallel()
	needRoot(t)
	rs := startOwnRedis(t, false)
	mon := startStartupMonitor(t, rs.port)
	b := bundleAt(t, rs.url(0))
	b.worker = b.startWorker() // returns once the worker logged "worker started"
	started := time.Now()

	rdb, _, err := redisconn.Open(rs.url(0))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
	s0, t0 := commandStats(t, rdb), time.Now()
	minute := mon.stop() // the start-up's commands, by what sent them
	time.Sleep(time.Until(t0.Add(idleWindow)))
	s1, t1 := commandStats(t, rdb), time.Now()

	window := t1.Sub(t0).Seconds()
	inWindow, breakdown := 0, []string{}
	for name, n := range s1 {
		if d := n - s0[name]; d != 0 {
			inWindow += d
			breakdown = append(breakdown, fmt.Sprintf("%s %d", name, d))
		}
	}
	sort.Strings(breakdown)
	perMinute := 0
	for _, src := range onceAMinute {
		n := minute[src.name]
		if n == 0 {
			t.Errorf("no command of %s at the worker's start: its commands are no longer recognised (onceAMinute), and would go uncounted", src.name)
		}
		perMinute += n
	}
	rate := float64(inWindow)/window + float64(perMinute)/60
	t.Logf("idle worker, one queue, %s: %d commands in %.1fs (%.2f/s: %s), and %d once a minute (%v): %.2f commands/s",
		redisVersion(t, rs.port), inWindow, window, float64(inWindow)/window, strings.Join(breakdown, ", "), perMinute, minute, rate)
	if rate > idleMaxRate {
		t.Errorf("an idle worker costs Redis %.2f commands/s, more than %.1f", rate, idleMaxRate)
	}

	// Still a worker: a task enqueued now (its wake-up published) runs.
	e0 := time.Now()
	rec := b.run(`{"version": 1, "steps": [{"run": ["true"]}]}`)
	if rec.State != record.StateCompleted {
		t.Fatalf("a task after the idle window: %s\n%s", rec.State, mustJSON(t, rec))
	}
	t.Logf("a task enqueued after the idle window started %s after its enqueue", rec.StartedAt.Sub(e0).Round(time.Millisecond))
}

// commandStats reads INFO commandstats: the calls of each command, the
// commands Lua scripts ran included, INFO's own left out (the test's).
func commandStats(t *testing.T, rdb redis.UniversalClient) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		name, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat || name == "info" {
			continue
		}
		v, _ := strings.CutPrefix(rest, "calls=")
		v, _, _ = strings.Cut(v, ",")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("INFO commandstats: %q", l)
		}
		out[name] = n
	}
	return out
}

// onceAMinute recognises the commands of the worker's periodic work that
// runs once a minute, and at its start, by the command a client sent
// (lowercase) and its first key (for a script, its first KEYS); the
// commands a script runs inside count with it.
var onceAMinute = []struct {
	name string
	is   func(cmd, key string) bool
}{
	{"asynq's recoverer", func(cmd, key string) bool {
		return (cmd == "evalsha" || cmd == "eval") && (strings.HasSuffix(key, ":lease") || strings.HasSuffix(key, ":aggregation_sets"))
	}},
	{"the sweeper's prune", func(cmd, key string) bool { return cmd == "zrange" && strings.Contains(key, "approvals:") }},
	{"the announcement's prune", func(cmd, key string) bool { return cmd == "hscan" && strings.Contains(key, "workers:") }},
}

// startupMonitor counts, through MONITOR, the commands of onceAMinute.
type startupMonitor struct {
	conn net.Conn
	done chan struct{}
	mu   sync.Mutex
	n    map[string]int
}

func startStartupMonitor(t *testing.T, port int) *startupMonitor {
	t.Helper()
	c, r := monitorRedis(t, port)
	m := &startupMonitor{conn: c, done: make(chan struct{}), n: map[string]int{}}
	t.Cleanup(func() { m.stop() })
	go func() {
		defer close(m.done)
		src := "" // what the last command a client sent belongs to
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			addr, args := monitorArgs(l)
			if len(args) == 0 {
				continue
			}
			if addr != "lua" { // a script's commands follow the script's own line
				cmd, key := strings.ToLower(args[0]), ""
				switch {
				case (cmd == "evalsha" || cmd == "eval") && len(args) > 3:
					key = args[3]
				case len(args) > 1:
					key = args[1]
				}
				src = ""
				for _, s := range onceAMinute {
					if s.is(cmd, key) {
						src = s.name
					}
				}
			}
			if src != "" {
				m.mu.Lock()
				m.n[src]++
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// stop ends the monitor and returns its counts.
func (m *startupMonitor) stop() map[string]int {
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// monitorArgs reads `+1701590000.123456 [0 127.0.0.1:5432] "cmd" "arg"...`:
// the client's address ("lua" for a script's commands) and the arguments,
// their escapes left as they are.
func monitorArgs(l string) (addr string, args []string) {
	i, j := strings.IndexByte(l, '['), strings.IndexByte(l, ']')
	if i < 0 || j < i {
		return "", nil
	}
	_, addr, _ = strings.Cut(l[i+1:j], " ")
	rest := l[j+1:]
	for {
		k := strings.IndexByte(rest, '"')
		if k < 0 {
			return addr, args
		}
		rest = rest[k+1:]
		var b strings.Builder
		for len(rest) > 0 && rest[0] != '"' {
			if rest[0] == '\\' && len(rest) > 1 {
				b.WriteByte(rest[0])
				rest = rest[1:]
			}
			b.WriteByte(rest[0])
			rest = rest[1:]
		}
		args = append(args, b.String())
		if len(rest) == 0 {
			return addr, args
		}
		rest = rest[1:]
	}
}
