//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// ceilNode is one redis-server the ceiling section started: private, on a
// free loopback port, without persistence.
type ceilNode struct {
	cmd  *exec.Cmd
	logs *logFile
	addr string
	rdb  *redis.Client // the meter's own connection (INFO, CLUSTER, SCAN)
	done chan struct{}
}

// freePort is a free loopback port; with bus set, one whose cluster bus
// port (port+10000) is free too.
func freePort(bus bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return p, nil
		}
		if p+10000 > 65535 {
			continue
		}
		if b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			b.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port (with a free cluster bus port)")
}

// startCeilNode starts redis-server (bin) with its files in dir, in
// cluster mode when cluster is set, and waits until it answers PING.
func startCeilNode(ctx context.Context, h *harness, bin, dir string, cluster bool) (*ceilNode, error) {
	var last error
	for range 3 {
		p, err := freePort(cluster)
		if err != nil {
			return nil, err
		}
		port := strconv.Itoa(p)
		args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--dir", dir, "--logfile", ""}
		if cluster {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+port+".conf"),
				"--cluster-node-timeout", "5000")
		}
		lf, err := os.CreateTemp(h.tmp, "ceiling-redis-"+port+"-")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		n := &ceilNode{cmd: cmd, logs: &logFile{f: lf, keep: h.opt.KeepLogs}, addr: "127.0.0.1:" + port, done: make(chan struct{})}
		if err := cmd.Start(); err != nil {
			n.logs.remove()
			return nil, err
		}
		go func() { _ = cmd.Wait(); close(n.done) }()
		n.rdb = redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, PoolSize: 2})
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if last = n.rdb.Ping(ctx).Err(); last == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		if last == nil {
			return n, nil
		}
		last = fmt.Errorf("redis-server on %s: %v\n%s", n.addr, last, n.logs.String())
		n.stop()
	}
	return nil, last
}

// pid is the server's process id.
func (n *ceilNode) pid() int { return n.cmd.Process.Pid }

// stop kills the server and removes its log.
func (n *ceilNode) stop() {
	n.rdb.Close()
	_ = n.cmd.Process.Kill()
	<-n.done
	n.logs.remove()
}

// alive reports an error when the server has exited.
func (n *ceilNode) alive() error {
	select {
	case <-n.done:
		return fmt.Errorf("redis-server %s exited\n%s", n.addr, n.logs.String())
	default:
		return nil
	}
}

// createCluster joins nodes into one cluster with redis-cli (cli) and
// waits until every node says cluster_state:ok and knows every slot's
// owner, as redistest.Cluster does.
func createCluster(ctx context.Context, cli string, nodes []*ceilNode) error {
	args := []string{"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for {
			info, err := n.rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				if owners, err := slotOwners(ctx, n.rdb); err == nil && len(owners) == len(nodes) {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %s: cluster not ok after 30s (%v):\n%s", n.addr, err, info)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// slotRange is a range of slots and the address of its master.
type slotRange struct {
	start, end int
	addr       string
}

// slotOwners reads CLUSTER SLOTS: the ranges and their masters, and
// returns the masters' addresses, each once, through the ranges.
func slotOwners(ctx context.Context, rdb *redis.Client) ([]string, error) {
	rs, err := slotRanges(ctx, rdb)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if !slices.Contains(out, r.addr) {
			out = append(out, r.addr)
		}
	}
	return out, nil
}

func slotRanges(ctx context.Context, rdb *redis.Client) ([]slotRange, error) {
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []slotRange
	covered := 0
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		out = append(out, slotRange{start: s.Start, end: s.End, addr: s.Nodes[0].Addr})
		covered += s.End - s.Start + 1
	}
	if covered != 16384 {
		return nil, fmt.Errorf("CLUSTER SLOTS covers %d of 16384 slots", covered)
	}
	return out, nil
}

// ownerOf is the master of slot.
func ownerOf(rs []slotRange, slot int) string {
	for _, r := range rs {
		if slot >= r.start && slot <= r.end {
			return r.addr
		}
	}
	return ""
}

// clusterQueues picks, for each node, a queue named prefix-ceil-<i> whose
// asynq keys (asynq:{queue}:…, and Airlock's …{queue}… keys) hash to a
// slot that node owns, by CLUSTER KEYSLOT and CLUSTER SLOTS.
func clusterQueues(ctx context.Context, rdb *redis.Client, prefix string, nodes []*ceilNode) ([]CeilingQueue, error) {
	rs, err := slotRanges(ctx, rdb)
	if err != nil {
		return nil, err
	}
	out := make([]CeilingQueue, len(nodes))
	found := 0
	for i := 0; found < len(nodes) && i < 1000; i++ {
		q := fmt.Sprintf("%s-ceil-%d", prefix, i)
		slot, err := rdb.ClusterKeySlot(ctx, "asynq:{"+q+"}:pending").Result()
		if err != nil {
			return nil, err
		}
		owner := ownerOf(rs, int(slot))
		for j, n := range nodes {
			if n.addr == owner && out[j].Name == "" {
				out[j] = CeilingQueue{Name: q, Slot: int(slot), Node: n.addr}
				found++
			}
		}
	}
	if found < len(nodes) {
		return nil, fmt.Errorf("no queue name found for every node (%d of %d)", found, len(nodes))
	}
	return out, nil
}

// untaggedKeys lists the keys of a node with no {hash tag}, up to limit:
// keys every run of every queue may share, in one slot.
func untaggedKeys(ctx context.Context, rdb *redis.Client, limit int) ([]string, int64) {
	var out []string
	var total int64
	it := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for it.Next(ctx) {
		total++
		k := it.Val()
		if !strings.Contains(k, "{") && len(out) < limit {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, total
}

// nodeStats is what INFO says of a node's commands.
type nodeStats struct {
	total int64 // stats: total_commands_processed
	calls int64 // commandstats: the calls of every command, summed
	// cpu is used_cpu_user + used_cpu_sys, a check of /proc.
	cpu time.Duration
	// by is calls per command.
	by map[string]int64
}

// readStats runs INFO stats commandstats cpu on a node.
func readStats(ctx context.Context, rdb *redis.Client) (nodeStats, error) {
	s, err := rdb.Info(ctx, "stats", "commandstats", "cpu").Result()
	if err != nil {
		return nodeStats{}, err
	}
	st := nodeStats{by: map[string]int64{}}
	var cpuS float64
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		switch {
		case k == "total_commands_processed":
			st.total, _ = strconv.ParseInt(v, 10, 64)
		case k == "used_cpu_user" || k == "used_cpu_sys":
			x, _ := strconv.ParseFloat(v, 64)
			cpuS += x
		case strings.HasPrefix(k, "cmdstat_"):
			for _, kv := range strings.Split(v, ",") {
				if c, ok := strings.CutPrefix(kv, "calls="); ok {
					n, _ := strconv.ParseInt(c, 10, 64)
					st.calls += n
					st.by[strings.TrimPrefix(k, "cmdstat_")] = n
				}
			}
		}
	}
	st.cpu = time.Duration(cpuS * float64(time.Second))
	return st, nil
}

// machineTicks reads /proc/stat's first line: the ticks of every CPU
// busy, and in all (idle and iowait counted as not busy).
func machineTicks() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		if i >= 8 { // guest time is already in user
			break
		}
		n, _ := strconv.ParseUint(s, 10, 64)
		all += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, all
}

// ownCPU is this process's CPU time (the enqueuers, the poller), not its
// children's.
func ownCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
