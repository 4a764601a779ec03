//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// TestScaleOutRedisOps measures the Redis commands a task costs, on a
// redis-server of its own that only this test uses, with three workers of
// two slots each: a MONITOR connection counts every command by the client
// that sent it (CLIENT LIST names them: the workers connect as
// fleet-worker-N, the test's client as fleet-client) and the commands
// Lua scripts run inside Redis apart. For each kind of task, the queue is
// paused, filled, then unpaused; the figures are per task: what the
// client's Enqueue sent, what the workers sent from the unpause until the
// last task's end (their idle polling included: an upper bound; the idle
// rate is measured first), and the commands the scripts ran. It asserts
// nothing about the figures; run it with -v to read them.
func TestScaleOutRedisOps(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("measurement")
	}
	needRoot(t)
	rs := startOwnRedis(t, false)
	const queue, prefix, n = "ops", "ops:", 100
	store := t.TempDir()
	f := newFleet(t, fleetConfig{
		url: rs.url(0), queue: queue, prefix: prefix, store: store,
		policy: writePolicy(t, fleetPolicy), workers: 3, concurrency: 2, uidBase: 340000, clientNames: true,
	})
	mon := startCmdCounter(t, rs.port)
	f.startAll(30 * time.Second)
	rdb, c := fleetClient(t, rs.url(0), prefix)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	ac := asynq.NewClientFromRedisClient(rdb)
	st := approve.NewStore(rdb, approve.Options{Prefix: prefix})
	ctx := waitCtx(t, 5*time.Minute)

	time.Sleep(time.Second) // past the start-up commands
	idle0, at0 := mon.snapshot(), time.Now()
	time.Sleep(3 * time.Second)
	idleRate := float64(mon.snapshot().sub(idle0).total("workers")) / time.Since(at0).Seconds()
	t.Logf("idle: %.0f requests/s from 3 workers (%.0f per worker), %d slots each, -task-check-interval 10ms", idleRate, idleRate/3, f.cfg.concurrency)

	type row struct {
		kind                     string
		enqueue, workers, lua    float64
		approver, adjusted, secs float64
		top                      string
	}
	var rows []row
	for phase, kind := range []string{"complete", "promote", "park"} {
		if err := insp.PauseQueue(queue); err != nil {
			t.Fatal(err)
		}
		s0 := mon.snapshot()
		ids := make([]string, n)
		for i := 0; i < n; i++ {
			s, err := decodeSpec(fleetSpec(kind, 1000*phase+i, "0", fmt.Sprintf(`"run_id": "ops-%s-%d",`, kind, i)), queue)
			if err != nil {
				t.Fatal(err)
			}
			e, err := c.Enqueue(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = e.TaskID
		}
		s1 := mon.snapshot()
		start := time.Now()
		if err := insp.UnpauseQueue(queue); err != nil {
			t.Fatal(err)
		}
		waitEnds := func(msg string, keys []string) {
			t.Helper()
			if !eventually(2*time.Minute, func() bool {
				got := f.journal.count(msg)
				for _, k := range keys {
					if got[k] == 0 {
						return false
					}
				}
				return true
			}) {
				t.Fatalf("%s: not every task logged %q", kind, msg)
			}
		}
		waitEnds("task end", ids)
		var approver float64
		if kind == "park" {
			a0 := mon.snapshot()
			var aids []string
			for _, id := range ids {
				rec, err := c.Status(ctx, queue, id)
				if err != nil {
					t.Fatal(err)
				}
				aids = append(aids, rec.ApprovalID)
			}
			a1 := mon.snapshot()
			for _, id := range aids {
				if _, _, err := approve.Accept(ctx, st, ac, id, "ops", ""); err != nil {
					t.Fatal(err)
				}
			}
			approver = float64(mon.snapshot().sub(a1).total("client")) / n
			t.Logf("park: reading the %d records (Status) took %.1f commands per task", n, float64(a1.sub(a0).total("client"))/n)
			waitEnds("promoted", aids)
		}
		time.Sleep(500 * time.Millisecond) // asynq marks the last tasks done after their "task end"
		secs := time.Since(start).Seconds()
		s2 := mon.snapshot()
		work := s2.sub(s1)
		r := row{
			kind: kind, secs: secs, approver: approver,
			enqueue: float64(s1.sub(s0).total("client")) / n,
			workers: float64(work.total("workers")) / n,
			lua:     float64(work.total("lua")) / n,
		}
		r.adjusted = max(0, float64(work.total("workers"))-idleRate*secs) / n
		r.top = work.top("workers", n, 8)
		rows = append(rows, r)
	}
	t.Logf("Redis commands per task (%d tasks per kind, 3 workers × %d slots, %s):", n, f.cfg.concurrency, redisVersion(t, rs.port))
	t.Logf("%-9s %8s %18s %16s %14s %10s", "kind", "enqueue", "workers (raw)", "workers - idle", "in scripts", "approver")
	for _, r := range rows {
		t.Logf("%-9s %8.1f %18.1f %16.1f %14.1f %10.1f   (%.1fs)", r.kind, r.enqueue, r.workers, r.adjusted, r.lua, r.approver, r.secs)
	}
	for _, r := range rows {
		t.Logf("%s, workers' commands per task: %s", r.kind, r.top)
	}
	f.stopAll(20 * time.Second)
}

// cmdCounter counts the commands a Redis server receives, through
// MONITOR, by the address of the client that sent them ("lua" for the
// commands scripts run), and learns the clients' names from CLIENT LIST.
type cmdCounter struct {
	t      *testing.T
	port   int
	mu     sync.Mutex
	byAddr map[string]map[string]int
	names  map[string]string

	callMu sync.Mutex // the names connection: one command at a time
	names2 net.Conn
	nr     *bufio.Reader
}

func startCmdCounter(t *testing.T, port int) *cmdCounter {
	t.Helper()
	c := &cmdCounter{t: t, port: port, byAddr: map[string]map[string]int{}, names: map[string]string{}}
	mon, mr := monitorRedis(t, port)
	var err error
	if c.names2, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	c.nr = bufio.NewReader(c.names2)
	if _, err := c.call("CLIENT", "SETNAME", "fleet-measure"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			l, err := mr.ReadString('\n')
			if err != nil {
				return
			}
			addr, cmd, ok := parseMonitorLine(l)
			if !ok {
				continue
			}
			c.mu.Lock()
			m := c.byAddr[addr]
			if m == nil {
				m = map[string]int{}
				c.byAddr[addr] = m
			}
			m[cmd]++
			c.mu.Unlock()
		}
	}()
	stop := make(chan struct{})
	refreshed := make(chan struct{})
	go func() {
		defer close(refreshed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				c.refreshNames()
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-refreshed
		mon.Close()
		c.names2.Close()
		<-done
	})
	return c
}

// parseMonitorLine reads `+1701590000.123456 [0 127.0.0.1:5432] "cmd" ...`.
func parseMonitorLine(l string) (addr, cmd string, ok bool) {
	i := strings.IndexByte(l, '[')
	j := strings.IndexByte(l, ']')
	if i < 0 || j < i {
		return "", "", false
	}
	_, addr, _ = strings.Cut(l[i+1:j], " ")
	rest := l[j+1:]
	k := strings.IndexByte(rest, '"')
	if k < 0 {
		return "", "", false
	}
	rest = rest[k+1:]
	e := strings.IndexByte(rest, '"')
	if e < 0 {
		return "", "", false
	}
	return addr, strings.ToLower(rest[:e]), true
}

// monitorRedis opens a connection to the Redis on 127.0.0.1:port and turns
// it into a MONITOR: its reader then gives each command Redis runs.
func monitorRedis(t *testing.T, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(c, 1<<20)
	if _, err := c.Write(respCommand("MONITOR")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	return c, r
}

func respCommand(args ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

// call sends a command on the names connection and returns its simple or
// bulk string reply.
func (c *cmdCounter) call(args ...string) (string, error) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if _, err := c.names2.Write(respCommand(args...)); err != nil {
		return "", err
	}
	l, err := c.nr.ReadString('\n')
	if err != nil {
		return "", err
	}
	switch l[0] {
	case '+':
		return strings.TrimSpace(l[1:]), nil
	case '$':
		n, _ := strconv.Atoi(strings.TrimSpace(l[1:]))
		if n < 0 {
			return "", nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.nr, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
	return "", fmt.Errorf("reply %q", l)
}

func (c *cmdCounter) refreshNames() {
	list, err := c.call("CLIENT", "LIST")
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, line := range strings.Split(list, "\n") {
		var addr, name string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				addr = v
			}
			if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			}
		}
		if addr != "" && name != "" {
			c.names[addr] = name
		}
	}
}

// cmdSnapshot is the counts at one moment, by who sent them: "workers",
// "client", "lua", "measure" or "other".
type cmdSnapshot map[string]map[string]int

func (c *cmdCounter) snapshot() cmdSnapshot {
	c.refreshNames()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := cmdSnapshot{}
	for addr, m := range c.byAddr {
		who := "other"
		switch name := c.names[addr]; {
		case addr == "lua":
			who = "lua"
		case strings.HasPrefix(name, "fleet-worker-"):
			who = "workers"
		case name == "fleet-client":
			who = "client"
		case name == "fleet-measure":
			who = "measure"
		}
		if out[who] == nil {
			out[who] = map[string]int{}
		}
		for cmd, n := range m {
			out[who][cmd] += n
		}
	}
	return out
}

func (s cmdSnapshot) sub(old cmdSnapshot) cmdSnapshot {
	out := cmdSnapshot{}
	for who, m := range s {
		out[who] = map[string]int{}
		for cmd, n := range m {
			if d := n - old[who][cmd]; d != 0 {
				out[who][cmd] = d
			}
		}
	}
	return out
}

func (s cmdSnapshot) total(who string) int {
	n := 0
	for _, v := range s[who] {
		n += v
	}
	return n
}

// top lists who's most frequent commands, per task.
func (s cmdSnapshot) top(who string, tasks, k int) string {
	type kv struct {
		cmd string
		n   int
	}
	var all []kv
	for cmd, n := range s[who] {
		all = append(all, kv{cmd, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].cmd < all[j].cmd })
	var parts []string
	for i, e := range all {
		if i == k {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", e.cmd, float64(e.n)/float64(tasks)))
	}
	return strings.Join(parts, ", ")
}

func redisVersion(t *testing.T, port int) string {
	rdb, _, err := redisconn.Open(fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	if err != nil {
		return "Redis ?"
	}
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		return "Redis ?"
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			return "Redis " + v
		}
	}
	return "Redis ?"
}

// fleetClient opens the test's own Redis client on url, named
// fleet-client (the commands counted apart from the workers'), and a Go
// client of prefix over it; both close when t ends.
func fleetClient(t *testing.T, url, prefix string) (redis.UniversalClient, *airlock.Client) {
	t.Helper()
	rdb, _, err := redisconn.Open(url + "?client_name=fleet-client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb, airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
}
