//go:build linux

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/internal/redis/wake"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/worker"
)

// Hidden subcommands: this binary re-executed as a server.
const (
	ChildArgWorker   = "__worker"
	ChildArgBaseline = "__baseline"
)

// Systems compared.
const (
	systemBaseline = "baseline"
	// systemDurable is the baseline server started with -durable: it also
	// writes each task's result to a file, durably.
	systemDurable = "durable"
	systemAirlock = "airlock"
)

// readyLine is what a server prints on stdout once it serves.
const readyLine = "ready"

// TaskCheckInterval is the idle poll interval of both servers.
const TaskCheckInterval = 10 * time.Millisecond

// Slot uids of the bench's workers: a range of their own, so that they never
// share a uid (and its RLIMIT_NPROC) with workers of other test runs.
const (
	uidFirst = 400000
	uidCount = 10000
)

// MaybeChild runs the server subcommand this process was started as, and
// exits; otherwise it returns at once. Call it at the top of main (after
// sandbox.MaybeHelper), or in TestMain.
func MaybeChild() {
	if len(os.Args) < 2 {
		return
	}
	var run func([]string) error
	switch os.Args[1] {
	case ChildArgWorker:
		run = workerChild
	case ChildArgBaseline:
		run = baselineChild
	default:
		return
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childFlags are the flags both servers take.
type childFlags struct {
	redisURL, queue, root string
	concurrency           int
	checkInterval         time.Duration
	fs                    *flag.FlagSet
}

func newChildFlags(name string) *childFlags {
	c := &childFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.StringVar(&c.redisURL, "redis", "", "Redis URL")
	c.fs.StringVar(&c.queue, "queue", "", "queue to serve")
	c.fs.StringVar(&c.root, "root", "", "directory of the workspaces")
	c.fs.IntVar(&c.concurrency, "concurrency", 2, "tasks at once")
	c.fs.DurationVar(&c.checkInterval, "check-interval", TaskCheckInterval, "asynq's idle poll interval")
	return c
}

func (c *childFlags) parse(args []string) (redis.UniversalClient, error) {
	if err := c.fs.Parse(args); err != nil {
		return nil, err
	}
	if c.queue == "" || c.root == "" {
		return nil, errors.New("-queue and -root are required")
	}
	rdb, _, err := redisconn.Open(c.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	return rdb, nil
}

// workerChild runs Airlock's worker in this process.
func workerChild(args []string) error {
	c := newChildFlags(ChildArgWorker)
	var isolation, uidLock, cpuprofile, store, logLevel string
	c.fs.StringVar(&isolation, "isolation", worker.Strict, "strict or best-effort")
	c.fs.StringVar(&uidLock, "uid-lock-dir", filepath.Join(os.TempDir(), "airlock-bench-uids"), "uid lock files")
	c.fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the worker here")
	c.fs.StringVar(&store, "store", "", "directory promoted outputs go to")
	c.fs.StringVar(&logLevel, "log-level", "info", "worker log level")
	var fetchAllow string
	c.fs.StringVar(&fetchAllow, "fetch-allow", "", "what input downloads may reach besides public addresses, comma-separated")
	var idleWait time.Duration
	var liveOutput bool
	c.fs.BoolVar(&liveOutput, "live-output", true, "live output (worker -live-output)")
	c.fs.DurationVar(&idleWait, "idle-wait", wake.DefaultMaxIdle, "longest a poll of empty queues waits for a wake-up (worker -idle-wait; 0: no waiting)")
	rdb, err := c.parse(args)
	if err != nil {
		return err
	}
	defer rdb.Close()
	lvl, err := zerolog.ParseLevel(logLevel)
	if err != nil {
		return err
	}
	cfg := worker.Config{
		Redis: rdb, Concurrency: c.concurrency, Queues: map[string]int{c.queue: 1},
		WorkspaceRoot: c.root, Isolation: isolation, UIDFirst: uidFirst, UIDCount: uidCount,
		UIDLockDir: uidLock, TaskCheckInterval: c.checkInterval, IdleWait: -1, NoLiveOutput: !liveOutput,
		Logger: zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger(),
	}
	if idleWait > 0 {
		cfg.IdleWait = idleWait
	}
	if fetchAllow != "" {
		cfg.FetchAllow = strings.Split(fetchAllow, ",")
	}
	if store != "" {
		if err := configureOutput(&cfg, store); err != nil {
			return err
		}
	}
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopProfile, err := startCPUProfile(cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// Ready once it serves its queues, as its /readyz says.
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for w.Ready() != nil {
		select {
		case err := <-done:
			return err
		case <-time.After(200 * time.Microsecond):
		}
	}
	fmt.Println(readyLine)
	return <-done
}

// baselineChild runs the baseline: an asynq server configured like the
// worker's whose handler runs each step's argv with os/exec, unconfined, in
// a fresh temporary directory, and stores a minimal record.
func baselineChild(args []string) error {
	c := newChildFlags(ChildArgBaseline)
	var cpuprofile, durable string
	c.fs.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the server here")
	c.fs.StringVar(&durable, "durable", "", "write each task's result (spec output.result) to this directory: temp file, fsync, rename, fsync of the directory")
	rdb, err := c.parse(args)
	if err != nil {
		return err
	}
	defer rdb.Close()
	stopProfile, err := startCPUProfile(cpuprofile)
	if err != nil {
		return err
	}
	defer stopProfile()
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:              c.concurrency,
		Queues:                   map[string]int{c.queue: 1},
		TaskCheckInterval:        c.checkInterval,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          3 * time.Second,
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(tasks.TypeRun, baselineHandler(c.root, durable, events.NewStream(rdb, "")))
	if err := srv.Start(mux); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Println(readyLine)
	<-ctx.Done()
	srv.Shutdown()
	return nil
}

// baselineRecord is the part of a run record the baseline fills in, enough
// for airlock.Client.Wait.
type baselineRecord struct {
	TaskID     string    `json:"task_id"`
	RunID      string    `json:"run_id"`
	Queue      string    `json:"queue"`
	State      string    `json:"state"`
	Verdict    string    `json:"verdict"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS float64   `json:"duration_ms"`
	Attempt    int       `json:"attempt"`
}

// The baseline appends the same event as the worker once its record is
// written, so that one client's Wait, which blocks on the events stream,
// serves both: the comparison is of the servers, not of how a client
// learns that a task is done.
func baselineHandler(root, durable string, ev *events.Stream) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		rec := baselineRecord{StartedAt: time.Now().UTC(), State: "completed", Verdict: "ok", Attempt: 1}
		rec.TaskID, _ = asynq.GetTaskID(ctx)
		rec.Queue, _ = asynq.GetQueueName(ctx)
		err := baselineRun(ctx, root, durable, t.Payload(), &rec)
		if err != nil {
			rec.State, rec.Verdict, rec.Error = "failed", "exit", err.Error()
		}
		rec.FinishedAt = time.Now().UTC()
		rec.DurationMS = float64(rec.FinishedAt.Sub(rec.StartedAt).Microseconds()) / 1000
		b, _ := json.Marshal(rec)
		if _, werr := t.ResultWriter().Write(b); werr != nil {
			return werr
		}
		_ = ev.Append(ctx, events.Event{TaskID: rec.TaskID, RunID: rec.RunID, State: record.State(rec.State), Verdict: record.Verdict(rec.Verdict)})
		if err != nil {
			return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
		}
		return nil
	}
}

func baselineRun(ctx context.Context, root, durable string, payload []byte, rec *baselineRecord) error {
	var spec tasks.Spec
	if err := json.Unmarshal(payload, &spec); err != nil {
		return err
	}
	rec.RunID = spec.RunID
	dir, err := os.MkdirTemp(root, "t-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"in", "out", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	for p, data := range spec.Files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(data), 0o600); err != nil {
			return err
		}
	}
	for _, st := range spec.Steps {
		cmd := exec.CommandContext(ctx, st.Run[0], st.Run[1:]...)
		cmd.Dir = dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("step %v: %w (stderr %q)", st.Run, err, stderr.String())
		}
	}
	if durable != "" && spec.Output != nil && spec.Output.Result != "" {
		b, err := os.ReadFile(filepath.Join(dir, spec.Output.Result))
		if err != nil {
			return err
		}
		return writeDurably(durable, rec.TaskID+".json", b)
	}
	return nil
}

// writeDurably is what a careful hand-written worker does to keep a
// result: write a temp file, fsync it, rename it to its name, fsync the
// directory.
func writeDurably(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// child is a server process started by the harness.
type child struct {
	cmd  *exec.Cmd
	logs *logFile
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startChild starts this binary as a server and waits for its ready line.
func (h *harness) startChild(ctx context.Context, system string, conc int, queue, root string, extra ...string) (*child, error) {
	sub := ChildArgBaseline
	args := []string{"-redis", h.opt.RedisURL, "-queue", queue, "-root", root, "-concurrency", strconv.Itoa(conc)}
	if system == systemAirlock {
		sub = ChildArgWorker
		args = append(args, "-isolation", h.isolation(), "-uid-lock-dir", h.uidLock, "-log-level", h.opt.WorkerLogLevel)
	}
	args = append(args, extra...)
	cmd := exec.Command(h.exe, append([]string{sub}, args...)...)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Its logs go to a file, not through this process: reading them would
	// take CPU from the server being measured.
	lf, err := os.CreateTemp(h.tmp, fmt.Sprintf("%s-%s-", queue, system))
	if err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, logs: &logFile{f: lf, keep: h.opt.KeepLogs}, done: make(chan struct{})}
	cmd.Stderr = lf
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.logs.remove()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		c.logs.remove()
		return nil, err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == readyLine {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	go func() { c.err = cmd.Wait(); close(c.done) }()
	select {
	case ok := <-ready:
		if ok {
			return c, nil
		}
		<-c.done
		defer c.logs.remove()
		return nil, fmt.Errorf("%s exited before it was ready: %v\n%s", sub, c.err, c.logs.String())
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	c.kill()
	defer c.logs.remove()
	return nil, fmt.Errorf("%s not ready after 60s (or canceled)\n%s", sub, c.logs.String())
}

// alive reports an error when the server has exited.
func (c *child) alive() error {
	select {
	case <-c.done:
		return fmt.Errorf("server exited: %v\n%s", c.err, c.logs.String())
	default:
		return nil
	}
}

// stop ends the server gracefully (SIGTERM), or kills it after 20s, and
// removes its log.
func (c *child) stop() error {
	defer c.logs.remove()
	select {
	case <-c.done:
		return fmt.Errorf("server had exited: %v\n%s", c.err, c.logs.String())
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		if c.err != nil {
			return fmt.Errorf("server: %v\n%s", c.err, c.logs.String())
		}
		return nil
	case <-time.After(20 * time.Second):
		c.kill()
		return fmt.Errorf("server did not stop within 20s of SIGTERM; killed\n%s", c.logs.String())
	}
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// rss reads VmRSS and VmHWM of the server, in KiB.
func (c *child) rss() (rssKB, hwmKB int64, err error) {
	return procRSS(c.cmd.Process.Pid)
}

func procRSS(pid int) (rssKB, hwmKB int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rssKB = n
		case "VmHWM":
			hwmKB = n
		}
	}
	if rssKB == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rssKB, hwmKB, nil
}

// treeCPU is the CPU time (user+system) of pid and of its direct children,
// each with the time of the descendants it has reaped, from /proc (clock
// ticks, 10 ms).
func treeCPU(pid int) time.Duration {
	total := procCPU(pid)
	for _, c := range children(pid) {
		total += procCPU(c)
	}
	return total
}

// procCPU is utime+stime+cutime+cstime of pid.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime..cstime are fields 14..17.
	if len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, s := range f[11:15] {
		n, _ := strconv.ParseInt(s, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on Linux.
const clockTicks = 100

// children lists the direct children of pid.
func children(pid int) []int {
	var out []int
	tids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// cpuUsed is the CPU time of the exited server and of every process it
// reaped (its helpers, and their steps), from wait4's rusage.
func (c *child) cpuUsed() time.Duration {
	if c.cmd.ProcessState == nil {
		return 0
	}
	return c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
}

// childrenRSS sums the VmRSS of the direct children of pid (the worker's
// slot helpers), in KiB.
func childrenRSS(pid int) int64 {
	var sum int64
	for _, p := range children(pid) {
		if r, _, err := procRSS(p); err == nil {
			sum += r
		}
	}
	return sum
}

// logFile is a server's stderr. With keep set, remove moves it there
// instead of deleting it.
type logFile struct {
	f    *os.File
	keep string
}

// String is the end of the log, for error messages.
func (l *logFile) String() string {
	const tail = 16 << 10
	fi, err := l.f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, fi.Size()-tail)
	b := make([]byte, fi.Size()-off)
	n, _ := l.f.ReadAt(b, off)
	return string(b[:n])
}

func (l *logFile) remove() {
	l.f.Close()
	if l.keep != "" {
		if os.Rename(l.f.Name(), filepath.Join(l.keep, filepath.Base(l.f.Name()))) == nil {
			return
		}
	}
	os.Remove(l.f.Name())
}

// startCPUProfile writes a CPU profile to path ("": none) until the
// returned function is called.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
