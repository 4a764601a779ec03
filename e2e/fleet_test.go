//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
)

// A fleet is N real worker processes on one Redis, as N hosts would run
// them: each has its own workspace root, uid range and uid lock directory;
// all serve one queue under one key prefix and publish into one store
// directory (as N hosts would share an object store). Each worker can be
// stopped, killed and started again; every start is an incarnation whose
// log lines are parsed as they arrive into the fleet's journal.

// fleetUIDSpan is the size of each worker's uid range.
//
// The tests of different packages run at the same time, and a fleet's
// leftover scan counts every process of its uids: each package runs steps
// in uids of its own. Here: 200000-209999 (one worker, the default range),
// 300000-359999 (fleets); internal/isolation/sandbox 370000-370999,
// worker 380000-380099, internal/bench 400000-409999.
const fleetUIDSpan = 16

type fleetConfig struct {
	url, queue, prefix string
	store, policy      string
	workers            int
	concurrency        int
	uidBase            int      // first uid of worker 0; worker i has uidBase+i*fleetUIDSpan...
	extra              []string // more worker flags
	// clientNames names each worker's Redis connections fleet-worker-<i>
	// (client_name= in its URL), for a MONITOR to tell them apart.
	clientNames bool
}

type fleet struct {
	t       *testing.T
	cfg     fleetConfig
	journal *journal
	members []*member
}

type member struct {
	f                 *fleet
	idx               int
	root, lockDir     string
	uidFirst, uidLast int

	mu  sync.Mutex
	cur *incarnation
	all []*incarnation
}

// incarnation is one start of a worker.
type incarnation struct {
	m       *member
	n       int
	cmd     *exec.Cmd
	log     *lineLog
	started time.Time
	done    chan struct{}
	exitErr error // once done is closed
	killed  atomic.Bool
}

// newFleet makes the members' directories; no worker is started.
func newFleet(t *testing.T, cfg fleetConfig) *fleet {
	t.Helper()
	tmp := t.TempDir()
	// Slot uids must be able to walk down to their workspaces.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	f := &fleet{t: t, cfg: cfg, journal: &journal{}}
	for i := 0; i < cfg.workers; i++ {
		first := cfg.uidBase + i*fleetUIDSpan
		f.members = append(f.members, &member{
			f: f, idx: i,
			root:     filepath.Join(tmp, fmt.Sprintf("host-%d", i), "ws"),
			lockDir:  filepath.Join(tmp, fmt.Sprintf("host-%d", i), "uids"),
			uidFirst: first, uidLast: first + fleetUIDSpan - 1,
		})
		if err := os.MkdirAll(filepath.Dir(f.members[i].root), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, m := range f.members {
			m.stop(20 * time.Second)
		}
		if t.Failed() {
			f.dumpLogs()
		}
		f.keepLogs()
	})
	return f
}

// startAll starts every member and waits until each serves.
func (f *fleet) startAll(ready time.Duration) {
	f.t.Helper()
	for _, m := range f.members {
		m.start()
	}
	for _, m := range f.members {
		if err := m.waitReady(ready); err != nil {
			f.t.Fatal(err)
		}
	}
}

// stopAll stops every member gracefully (SIGTERM), in parallel.
func (f *fleet) stopAll(d time.Duration) {
	var wg sync.WaitGroup
	for _, m := range f.members {
		wg.Add(1)
		go func() { defer wg.Done(); m.stop(d) }()
	}
	wg.Wait()
}

func (m *member) args() []string {
	c := m.f.cfg
	url := c.url
	if c.clientNames {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += fmt.Sprintf("%sclient_name=fleet-worker-%d", sep, m.idx)
	}
	a := []string{
		"-redis", url, "-prefix", c.prefix, "-queues", c.queue,
		"-workspace-root", m.root, "-uid-range", fmt.Sprintf("%d-%d", m.uidFirst, m.uidLast),
		"-uid-lock-dir", m.lockDir, "-store", c.store, "-concurrency", strconv.Itoa(c.concurrency),
		"-shutdown-timeout", "1s", "-grace", "200ms",
	}
	if c.policy != "" {
		a = append(a, "-policy", c.policy)
	}
	return append(a, c.extra...)
}

// start starts a new incarnation of the worker; it does not wait for it
// to serve (a worker started while Redis is away waits for it). It
// returns nil, having failed the test, when the process cannot start.
func (m *member) start() *incarnation {
	m.f.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	inc := &incarnation{m: m, n: len(m.all), done: make(chan struct{}), started: time.Now()}
	inc.log = &lineLog{j: m.f.journal, worker: m.idx, inc: inc.n}
	cmd := exec.Command(bin.worker, m.args()...)
	cmd.Stdout, cmd.Stderr = inc.log, inc.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A process that kept the worker's stderr open (a helper that
	// outlived it) would hold Wait forever: bound it, and say so.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		m.f.t.Errorf("worker %d: %v", m.idx, err) // may run on another goroutine than the test's
		return nil
	}
	inc.cmd = cmd
	go func() { inc.exitErr = cmd.Wait(); close(inc.done) }()
	m.cur = inc
	m.all = append(m.all, inc)
	return inc
}

// current returns the running incarnation, nil when none runs.
func (m *member) current() *incarnation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil || m.cur.exited() {
		return nil
	}
	return m.cur
}

func (i *incarnation) exited() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

func (i *incarnation) pid() int { return i.cmd.Process.Pid }

// waitReady waits until the current incarnation logged "worker started".
func (m *member) waitReady(d time.Duration) error {
	m.mu.Lock()
	inc := m.cur
	m.mu.Unlock()
	if inc == nil {
		return fmt.Errorf("worker %d was never started", m.idx)
	}
	deadline := time.Now().Add(d)
	for !strings.Contains(inc.log.String(), `"worker started"`) {
		if inc.exited() {
			return fmt.Errorf("worker %d exited at start (%v):\n%s", m.idx, inc.exitErr, inc.log.tail(8<<10))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker %d not ready after %s:\n%s", m.idx, d, inc.log.tail(8<<10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// kill SIGKILLs the current incarnation and waits for it; nil when none
// was running.
func (m *member) kill() *incarnation {
	inc := m.current()
	if inc == nil {
		return nil
	}
	inc.killed.Store(true)
	_ = inc.cmd.Process.Kill()
	<-inc.done
	return inc
}

// stop ends the current incarnation with SIGTERM, or SIGKILL after d.
func (m *member) stop(d time.Duration) {
	inc := m.current()
	if inc == nil {
		return
	}
	_ = inc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-inc.done:
	case <-time.After(d):
		m.f.t.Errorf("worker %d (pid %d) did not stop within %s of SIGTERM; killed", m.idx, inc.pid(), d)
		inc.killed.Store(true)
		_ = inc.cmd.Process.Kill()
		<-inc.done
	}
}

// incarnations returns every start of every member.
func (f *fleet) incarnations() []*incarnation {
	var out []*incarnation
	for _, m := range f.members {
		m.mu.Lock()
		out = append(out, m.all...)
		m.mu.Unlock()
	}
	return out
}

func (f *fleet) dumpLogs() {
	for _, inc := range f.incarnations() {
		f.t.Logf("worker %d incarnation %d (pid %d, killed %v, exit %v), last lines:\n%s",
			inc.m.idx, inc.n, inc.pid(), inc.killed.Load(), inc.exitErr, inc.log.tail(6<<10))
	}
}

// keepLogs writes every incarnation's log into $AIRLOCK_FLEET_LOGS, when
// set, as worker-<i>-<n>.log.
func (f *fleet) keepLogs() {
	dir := os.Getenv("AIRLOCK_FLEET_LOGS")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Logf("AIRLOCK_FLEET_LOGS: %v", err)
		return
	}
	for _, inc := range f.incarnations() {
		name := filepath.Join(dir, fmt.Sprintf("%s-worker-%d-%d.log", strings.ReplaceAll(f.t.Name(), "/", "_"), inc.m.idx, inc.n))
		if err := os.WriteFile(name, []byte(inc.log.String()), 0o644); err != nil {
			f.t.Logf("AIRLOCK_FLEET_LOGS: %v", err)
		}
	}
}

// journal holds the task lines of every worker's log, as they arrived.
type journal struct {
	mu      sync.Mutex
	entries []logEntry
}

// logEntry is one parsed log line: "task start", "task end", "promoted"
// (a promote task's end), "task interrupted by shutdown; ...".
type logEntry struct {
	at         time.Time // when the line reached the test
	worker     int
	inc        int
	msg        string
	taskID     string
	runID      string
	attempt    int
	state      string
	approvalID string
	published  bool
}

func (j *journal) add(e logEntry) {
	j.mu.Lock()
	j.entries = append(j.entries, e)
	j.mu.Unlock()
}

func (j *journal) snapshot() []logEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]logEntry(nil), j.entries...)
}

// count returns how many entries with message msg the journal holds for
// each task id (approval id for "promoted").
func (j *journal) count(msg string) map[string]int {
	out := map[string]int{}
	for _, e := range j.snapshot() {
		if e.msg != msg {
			continue
		}
		if msg == "promoted" {
			out[e.approvalID]++
		} else {
			out[e.taskID]++
		}
	}
	return out
}

// lineLog is a worker's stdout and stderr: kept whole, and its task lines
// parsed into the journal on arrival.
type lineLog struct {
	j           *journal
	worker, inc int

	mu      sync.Mutex
	raw     bytes.Buffer
	partial []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.parse(now, l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	l.partial = append([]byte(nil), l.partial...)
	return len(p), nil
}

var journalMessages = [][]byte{
	[]byte(`"message":"task start"`), []byte(`"message":"task end"`), []byte(`"message":"promoted"`),
	[]byte(`"message":"task interrupted by shutdown`),
	[]byte(`"approval_id":"ap-`), // promotions, their failures and retries
}

func (l *lineLog) parse(at time.Time, line []byte) {
	hit := false
	for _, m := range journalMessages {
		hit = hit || bytes.Contains(line, m)
	}
	if !hit {
		return
	}
	var v struct {
		Message    string `json:"message"`
		TaskID     string `json:"task_id"`
		RunID      string `json:"run_id"`
		Attempt    int    `json:"attempt"`
		State      string `json:"state"`
		ApprovalID string `json:"approval_id"`
		Published  bool   `json:"published"`
	}
	if json.Unmarshal(line, &v) != nil {
		return
	}
	msg := v.Message
	if strings.HasPrefix(msg, "task interrupted by shutdown") {
		msg = "handed back"
	}
	l.j.add(logEntry{at: at, worker: l.worker, inc: l.inc, msg: msg, taskID: v.TaskID, runID: v.RunID,
		attempt: v.Attempt, state: v.State, approvalID: v.ApprovalID, published: v.Published})
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

func (l *lineLog) tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// inFlight returns the task ids an incarnation started and did not end
// (nor hand back), by its log.
func (f *fleet) inFlight(inc *incarnation) []string {
	open := map[string]bool{}
	for _, e := range f.journal.snapshot() {
		if e.worker != inc.m.idx || e.inc != inc.n {
			continue
		}
		switch e.msg {
		case "task start":
			open[e.taskID] = true
		case "task end", "handed back":
			delete(open, e.taskID)
		}
	}
	out := make([]string, 0, len(open))
	for id := range open {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// leftovers lists what the fleet's workers left on the machine once they
// stopped: processes of their slot uids, mounts below their workspace
// roots, entries of the workspace roots other than the lock file, and the
// cgroups of their processes.
func (f *fleet) leftovers() []string {
	var out []string
	inRange := func(uid int) bool {
		for _, m := range f.members {
			if uid >= m.uidFirst && uid <= m.uidLast {
				return true
			}
		}
		return false
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 || fields[0] != "Uid:" {
				continue
			}
			for _, s := range fields[1:5] {
				if uid, _ := strconv.Atoi(s); inRange(uid) {
					cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
					out = append(out, fmt.Sprintf("process %s of uid %d: %s", e.Name(), uid, strings.ReplaceAll(string(cl), "\x00", " ")))
					break
				}
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			for _, m := range f.members {
				if fields[4] == m.root || strings.HasPrefix(fields[4], m.root+"/") {
					out = append(out, "mount "+fields[4])
				}
			}
		}
	}
	for _, m := range f.members {
		ents, err := os.ReadDir(m.root)
		if err != nil && !os.IsNotExist(err) {
			out = append(out, fmt.Sprintf("workspace root %s: %v", m.root, err))
		}
		for _, e := range ents {
			if e.Name() != ".lock" {
				out = append(out, "workspace "+filepath.Join(m.root, e.Name()))
			}
		}
	}
	pids := map[string]bool{}
	for _, inc := range f.incarnations() {
		pids["airlock-"+strconv.Itoa(inc.pid())] = true
	}
	if cg, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		seen := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, pat := range []string{"/sys/fs/cgroup" + parts[2] + "/airlock-*", "/sys/fs/cgroup/*" + parts[2] + "/airlock-*"} {
				dirs, _ := filepath.Glob(pat)
				for _, d := range dirs {
					if pids[filepath.Base(d)] && !seen[d] {
						seen[d] = true
						out = append(out, "cgroup "+d)
					}
				}
			}
		}
	}
	return out
}

// publication is one task directory of the store.
type publication struct {
	dir      string
	manifest approve.Manifest
	problems []string // files that do not match the manifest
}

// publications walks a store directory: every task directory
// (<store>/<run_id>/<task_id>), by task id, with its manifest and its
// files checked against the manifest's digests (a directory without a
// manifest is a publication with a problem); and the entries left in the
// store's staging directory.
func publications(t *testing.T, store string) (map[string][]publication, []string) {
	t.Helper()
	out := map[string][]publication{}
	var staging []string
	if ents, err := os.ReadDir(filepath.Join(store, ".staging")); err == nil {
		for _, e := range ents {
			staging = append(staging, e.Name())
		}
	}
	runs, err := os.ReadDir(store)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("reading the store: %v", err)
	}
	for _, run := range runs {
		if !run.IsDir() || run.Name() == ".staging" {
			continue
		}
		taskDirs, err := os.ReadDir(filepath.Join(store, run.Name()))
		if err != nil {
			t.Fatalf("reading the store: %v", err)
		}
		for _, td := range taskDirs {
			pub := publication{dir: filepath.Join(store, run.Name(), td.Name())}
			pub.check()
			out[td.Name()] = append(out[td.Name()], pub)
		}
	}
	return out, staging
}

// check reads the publication's manifest and checks its files.
func (pub *publication) check() {
	b, err := os.ReadFile(filepath.Join(pub.dir, "manifest.json"))
	if err != nil {
		pub.problems = append(pub.problems, "no manifest: "+err.Error())
		return
	}
	if err := json.Unmarshal(b, &pub.manifest); err != nil {
		pub.problems = append(pub.problems, "manifest: "+err.Error())
	}
	want := map[string]string{}
	if r := pub.manifest.Result; r != nil {
		want[approve.ResultName] = r.SHA256
	}
	for _, a := range pub.manifest.Artifacts {
		want[a.Name] = a.SHA256
	}
	for name, sum := range want {
		data, err := os.ReadFile(filepath.Join(pub.dir, name))
		if err != nil {
			pub.problems = append(pub.problems, err.Error())
			continue
		}
		h := sha256.Sum256(data)
		if hex.EncodeToString(h[:]) != sum {
			pub.problems = append(pub.problems, fmt.Sprintf("%s: sha256 %x, manifest %s", name, h, sum))
		}
	}
	// Nothing but the manifest's files (and the manifest).
	_ = filepath.WalkDir(pub.dir, func(q string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(pub.dir, q)
		if _, ok := want[rel]; !ok && rel != "manifest.json" {
			pub.problems = append(pub.problems, "unexpected file "+rel)
		}
		return nil
	})
	if filepath.Base(pub.dir) != pub.manifest.TaskID {
		pub.problems = append(pub.problems, "directory of task "+filepath.Base(pub.dir)+" holds the manifest of task "+pub.manifest.TaskID)
	}
}

// ownRedis is a redis-server of a test's own, which the test can stop and
// start again on the same port and directory (with AOF on, its data
// survives).
type ownRedis struct {
	t    *testing.T
	path string
	dir  string
	port int
	aof  bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startOwnRedis starts a redis-server on a free loopback port, skipping
// the test when there is none on PATH.
func startOwnRedis(t *testing.T, aof bool) *ownRedis {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("needs redis-server on PATH (CI installs it)")
	}
	r := &ownRedis{t: t, path: path, dir: t.TempDir(), aof: aof}
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if err = r.start(); err == nil {
			break
		}
		if attempt == 2 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		r.mu.Lock()
		cmd, done := r.cmd, r.done
		r.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return r
}

func (r *ownRedis) url(db int) string { return fmt.Sprintf("redis://127.0.0.1:%d/%d", r.port, db) }

// start starts the server and waits until it answers PING (after loading
// its AOF).
func (r *ownRedis) start() error {
	aof := "no"
	if r.aof {
		aof = "yes"
	}
	cmd := exec.Command(r.path, "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir,
		"--save", "", "--appendonly", aof, "--appendfsync", "everysec",
		"--loglevel", "notice", "--logfile", filepath.Join(r.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pingRaw(r.port) {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited at start: %s", r.port, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d does not answer PING", r.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server with SIGTERM (Redis flushes its AOF) and waits.
func (r *ownRedis) stop() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.t.Errorf("redis-server did not stop within 30s of SIGTERM; killed")
		_ = cmd.Process.Kill()
		<-done
	}
}

// pingRaw reports whether a Redis on port answers PING with PONG (not
// LOADING), over a plain connection.
func pingRaw(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// fleetSpec is the JSON of a task of kind kind, numbered i, sleeping
// sleep in its step:
//
//   - promote: a result {"total": i%1000} and a CSV artifact; promoted by
//     fleetPolicy;
//   - park: a result {"total": 5000+i}, parked by fleetPolicy's rule;
//   - fail: a step that exits 1;
//   - complete: no output.
func fleetSpec(kind string, i int, sleep string, extra string) string {
	var script string
	output := ""
	switch kind {
	case "promote", "park":
		total := i % 1000
		if kind == "park" {
			total = 5000 + i
		}
		script = fmt.Sprintf("sleep %s; printf '{\"total\": %d}' > out/result.json; printf 'task,total\\n%d,%d\\n' > out/report.csv", sleep, total, i, total)
		output = `, "output": {"result": "out/result.json", "schema": {"type": "object", "required": ["total"]}, "artifacts": ["out/*.csv"]}`
	case "fail":
		script = fmt.Sprintf("sleep %s; echo failing on purpose >&2; exit 1", sleep)
	case "complete":
		script = fmt.Sprintf("sleep %s; echo done", sleep)
	default:
		panic("fleetSpec: kind " + kind)
	}
	js, _ := json.Marshal(script)
	return `{"version": 1,` + extra + ` "files": {"run.sh": ` + string(js) + `}, "steps": [{"name": "run", "run": ["sh", "run.sh"]}]` + output + `}`
}

// fleetPolicy promotes every output but those whose total is above 1000.
const fleetPolicy = `{"default": "promote", "rules": [{"name": "big-total", "when": {"result": {"pointer": "/total", "op": ">", "value": 1000}}, "then": "park"}]}`

// fleetKind is the kind of task i of a mix: 4 in 10 promote, 3 park, 2
// fail, 1 completes without output.
func fleetKind(i int) string {
	switch i % 10 {
	case 0, 1, 2, 3:
		return "promote"
	case 4, 5, 6:
		return "park"
	case 7, 8:
		return "fail"
	}
	return "complete"
}

// waitCtx is a context that ends after d, canceled when t ends.
func waitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// story is what happened to a task: its events (state, approval) and the
// workers' log lines about it (its approval's promote task included).
func (f *fleet) story(taskID string, evs []events.Event) string {
	var b strings.Builder
	approval := ""
	for _, e := range evs {
		if e.TaskID == taskID {
			fmt.Fprintf(&b, "  event %s %s (approval %s)\n", e.ID, e.State, e.ApprovalID)
			if e.ApprovalID != "" {
				approval = e.ApprovalID
			}
		}
	}
	for _, e := range f.journal.snapshot() {
		if e.taskID == taskID || approval != "" && e.approvalID == approval {
			fmt.Fprintf(&b, "  %s worker %d/%d %s attempt %d state %s published %v\n", e.at.Format("15:04:05.000"), e.worker, e.inc, e.msg, e.attempt, e.state, e.published)
		}
	}
	return b.String()
}
