//go:build linux

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/redis/wake"
)

// Main is the bench command: it parses args, runs the benchmark and prints
// the table (or JSON) on stdout, progress on stderr. It returns the exit
// status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	rs := cli.NewRedis()
	var opt Options
	var conc, sections, workloads string
	var asJSON, quiet bool
	var jsonOut string
	rs.RegisterURL(fs, "; a dedicated database is best, e.g. redis://127.0.0.1:6379/9")
	fs.IntVar(&opt.N, "n", FullN, "scale: tasks per throughput run (CPU-bound: n/5), idle-latency tasks max(n/5,20), overhead iterations n, approvals 10n, RSS-run tasks n²/10, sessions max(n/20,10) per path and round")
	fs.IntVar(&opt.Rounds, "rounds", 3, "interleaved rounds; figures are their median, min and max")
	fs.StringVar(&conc, "concurrency", "", "concurrencies of the throughput runs, comma-separated (default 2 and 2×cores+1)")
	fs.StringVar(&sections, "only", "", "run only these sections, comma-separated: "+strings.Join(AllSections, ","))
	var intervals string
	fs.StringVar(&intervals, "check-intervals", "", "poll intervals the idle section compares for Airlock without its wake-up (-idle-wait 0), comma-separated (default 10ms); bare asynq polls every 10ms, and Airlock with its wake-up waits -idle-wait "+wake.DefaultMaxIdle.String())
	fs.StringVar(&workloads, "workloads", "", "throughput workloads, comma-separated: "+strings.Join(AllWorkloads, ","))
	fs.IntVar(&opt.RSSTasks, "rss-tasks", 0, "tasks of the RSS run (default n²/10: 100000 at the full n)")
	var fetchMB int
	fs.IntVar(&fetchMB, "fetch-mb", DefaultFetchBytes>>20, "size of the fetch section's download, MiB")
	fs.StringVar(&opt.CPUProfile, "cpuprofile", "", "also profile a worker and a baseline server on the trivial and script workloads: the worker's CPU profile here, the others next to it (FILE.baseline, FILE.script, FILE.script.durable)")
	fs.StringVar(&opt.WorkerLogLevel, "worker-log-level", "info", "log level of the Airlock workers (info, as deployed)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON instead of tables")
	fs.StringVar(&jsonOut, "o", "", "also write the report as JSON to this file")
	fs.BoolVar(&quiet, "q", false, "no progress lines on stderr")
	fs.StringVar(&opt.KeepLogs, "keep-logs", "", "move the servers' logs to this directory instead of deleting them")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bench [flags]\n\nMeasures Airlock's worker against a bare asynq server running the same argv.\n\nexit status: 0 done, 1 error, 2 bad flags\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := rs.Check(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	opt.RedisURL = rs.URL
	for _, iv := range strings.Split(intervals, ",") {
		if strings.TrimSpace(iv) == "" {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(iv))
		if err != nil || d <= 0 {
			fmt.Fprintf(stderr, "bench: -check-intervals: %q is not a positive duration\n", iv)
			return 2
		}
		opt.CheckIntervals = append(opt.CheckIntervals, d)
	}
	if fetchMB <= 0 {
		fmt.Fprintf(stderr, "bench: -fetch-mb: must be positive\n")
		return 2
	}
	opt.FetchBytes = int64(fetchMB) << 20
	if conc != "" {
		for _, s := range strings.Split(conc, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || c < 1 {
				fmt.Fprintf(stderr, "bench: -concurrency: %q is not a positive integer\n", s)
				return 2
			}
			opt.Concurrency = append(opt.Concurrency, c)
		}
	}
	if sections != "" {
		opt.Sections = strings.Split(sections, ",")
	}
	if workloads != "" {
		opt.Workloads = strings.Split(workloads, ",")
	}
	if !quiet {
		opt.Progress = stderr
	}
	rep, err := Run(ctx, opt)
	if rep != nil && (err == nil || asJSON) {
		if asJSON {
			_ = rep.WriteJSON(stdout)
		} else {
			_ = rep.WriteTable(stdout)
		}
	}
	if rep != nil && jsonOut != "" {
		f, ferr := os.Create(jsonOut)
		if ferr == nil {
			ferr = errors.Join(rep.WriteJSON(f), f.Close())
		}
		if ferr != nil {
			fmt.Fprintf(stderr, "bench: -o: %v\n", ferr)
			if err == nil {
				return 1
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", rs.Explain(err))
		return 1
	}
	return 0
}

// deleteQueue removes everything of queue q: the asynq queue and every key
// below "asynq:{q}:" (completed tasks and counters, which DeleteQueue
// leaves), and the limits, grants, actions' catalog and announcements a
// worker published for it.
func deleteQueue(ctx context.Context, rdb redis.UniversalClient, insp *asynq.Inspector, q string) error {
	// DeleteQueue refuses while a task is active (a server that was killed
	// leaves them so): the keys below go anyway.
	_ = insp.DeleteQueue(q, true)
	// One key per command: they are in different slots of a Cluster.
	for _, k := range []string{queuepolicy.Key("", q), queuepolicy.GrantsKey("", q), queuepolicy.ActionsKey("", q), queuepolicy.WorkersKey("", q)} {
		if err := rdb.Unlink(ctx, k).Err(); err != nil {
			return err
		}
	}
	if err := deletePrefix(ctx, rdb, "asynq:{"+q+"}:"); err != nil {
		return err
	}
	return rdb.SRem(ctx, asynqkey.Queues, q).Err()
}

// withTimeout is a context for cleanup after ctx may have ended.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
