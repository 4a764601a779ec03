//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// The deployment: docker-compose.yml's worker, started the way Docker
// would start it, and the worker's start without Redis. Docker does not
// run here; its capability set is emulated with setpriv.

// dockerDefaultCaps is the capability set Docker gives a container (moby's
// oci/caps/defaults.go), before cap_add and cap_drop.
var dockerDefaultCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
}

// capBits numbers the capabilities a compose file may name (linux/capability.h).
var capBits = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
	"SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
	"NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
	"SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
	"SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
	"SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
	"SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
	"BLOCK_SUSPEND": 36, "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}

type composeService struct {
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	CapAdd      []string          `yaml:"cap_add"`
	CapDrop     []string          `yaml:"cap_drop"`
	SecurityOpt []string          `yaml:"security_opt"`
	ReadOnly    bool              `yaml:"read_only"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	Secrets     []string          `yaml:"secrets"`
	Restart     string            `yaml:"restart"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Secrets  map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if _, ok := c.Services["worker"]; !ok {
		t.Fatal("docker-compose.yml has no worker service")
	}
	return c
}

// normCap turns "CAP_sys_admin" and "SYS_ADMIN" alike into "SYS_ADMIN".
func normCap(c string) string {
	return strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c)), "CAP_")
}

// containerCaps is the capability set of a container with these cap_add
// and cap_drop.
func containerCaps(t *testing.T, add, drop []string) []string {
	t.Helper()
	var out []string
	dropped := map[string]bool{}
	for _, d := range drop {
		dropped[normCap(d)] = true
	}
	if !dropped["ALL"] {
		for _, c := range dockerDefaultCaps {
			if !dropped[c] {
				out = append(out, c)
			}
		}
	}
	for _, a := range add {
		a = normCap(a)
		if a == "ALL" {
			t.Fatal("docker-compose.yml: cap_add ALL")
		}
		if _, ok := capBits[a]; !ok {
			t.Fatalf("docker-compose.yml: cap_add %q: not a capability this test knows", a)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// setprivArgs runs a command as root with exactly caps: the bounding set
// (which, for root, is what exec leaves permitted and effective), an empty
// inheritable set, no ambient capabilities — as Docker starts a
// container's process.
func setprivArgs(t *testing.T, caps []string) []string {
	t.Helper()
	path, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux): cannot emulate the container's capabilities")
	}
	bset := "-all"
	for _, c := range caps {
		bset += ",+" + strings.ToLower(c)
	}
	return []string{path, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=" + bset, "--"}
}

func capMask(caps []string) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << capBits[c]
	}
	return m
}

// procCaps reads a process's effective and bounding capability sets.
func procCaps(pid int) (eff, bnd uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "CapEff":
			eff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		case "CapBnd":
			bnd, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return eff, bnd, nil
}

// startCmd starts a worker with argv (the worker binary, or a wrapper of
// it) and stops it with SIGTERM when the test ends; it does not wait for
// it to be ready.
func startCmd(t *testing.T, argv []string, env ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(withoutRedisURL(os.Environ()), env...)
	logs := &lockedBuffer{}
	cmd.Stderr, cmd.Stdout = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wp := &workerProc{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(wp.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-wp.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-wp.done
		}
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	return wp
}

// waitLog waits until the worker logged substr; it fails t if the worker
// exits first or d passes.
func waitLog(t *testing.T, wp *workerProc, substr string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(wp.logs.String(), substr) {
		select {
		case <-wp.done:
			t.Fatalf("worker exited (%v) before logging %q:\n%s", wp.cmd.ProcessState, substr, wp.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker did not log %q within %v:\n%s", substr, d, wp.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exitOf waits up to d for the worker to exit and returns its exit code
// (-1 when it did not exit).
func exitOf(wp *workerProc, d time.Duration) int {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wp.done:
		return wp.cmd.ProcessState.ExitCode()
	default:
	}
	select {
	case <-wp.done:
		return wp.cmd.ProcessState.ExitCode()
	case <-t.C:
		return -1
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// flagValue is the value of -name in a compose command ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if (a == "-"+name || a == "--"+name) && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestComposeFile checks what docker-compose.yml promises without a
// worker: Redis persists to a volume, has a healthcheck the worker waits
// for, the store is on a named volume, the worker has a healthcheck on
// its -metrics-addr port.
func TestComposeFile(t *testing.T) {
	c := readCompose(t)
	redis, ok := c.Services["redis"]
	if !ok {
		t.Fatal("no redis service")
	}
	w := c.Services["worker"]
	if rc := strings.Join(redis.Command, " "); !strings.Contains(rc, "--appendonly yes") {
		t.Errorf("redis command %q: want --appendonly yes", rc)
	}
	if !slices.ContainsFunc(redis.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
		t.Errorf("redis volumes %v: want a volume on /data (the AOF)", redis.Volumes)
	}
	if len(redis.Healthcheck.Test) == 0 || !strings.Contains(strings.Join(redis.Healthcheck.Test, " "), "ping") {
		t.Errorf("redis healthcheck %v: want a redis-cli ping", redis.Healthcheck.Test)
	}
	if d := w.DependsOn["redis"].Condition; d != "service_healthy" {
		t.Errorf("worker depends_on redis condition %q, want service_healthy", d)
	}
	store := flagValue(w.Command, "store")
	if !strings.HasPrefix(store, "/") {
		t.Fatalf("worker command %v: want -store on an absolute path (a volume)", w.Command)
	}
	onVolume := false
	for _, v := range w.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst, _, _ = strings.Cut(dst, ":")
		if _, named := c.Volumes[src]; named && (store == dst || strings.HasPrefix(store, strings.TrimSuffix(dst, "/")+"/")) {
			onVolume = true
		}
	}
	if !onVolume {
		t.Errorf("-store %s is on no named volume of the worker (%v)", store, w.Volumes)
	}
	addr := flagValue(w.Command, "metrics-addr")
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		t.Fatalf("worker command %v: want -metrics-addr HOST:PORT (%v)", w.Command, err)
	}
	if hc := strings.Join(w.Healthcheck.Test, " "); !strings.Contains(hc, "/"+port) || !strings.Contains(hc, "/readyz") {
		t.Errorf("worker healthcheck %q: want /readyz on port %s", hc, port)
	}
	if w.Restart == "" || redis.Restart == "" {
		t.Errorf("restart policies: worker %q, redis %q", w.Restart, redis.Restart)
	}
}

// TestComposeCapabilities starts the real worker as docker-compose.yml's
// worker service would be started: its command (Redis, queue, directories
// and the HTTP port overridden for the test), as root with exactly
// Docker's default capabilities plus the file's cap_add, in strict
// isolation. It must start, run a task, and pass the file's healthcheck.
// Then, for each capability cap_add lists, the worker without it must
// refuse to start: the list holds nothing it does not need.
func TestComposeCapabilities(t *testing.T) {
	t.Parallel()
	needRoot(t)
	c := readCompose(t)
	w := c.Services["worker"]
	caps := containerCaps(t, w.CapAdd, w.CapDrop)

	start := func(t *testing.T, b *bundle, caps []string, httpPort int) *workerProc {
		argv := append(setprivArgs(t, caps), bin.worker)
		argv = append(argv, w.Command...)
		argv = append(argv, "-redis", b.url, "-queues", b.queue, "-workspace-root", b.root,
			"-uid-lock-dir", filepath.Join(os.TempDir(), "airlock-e2e-uids"), "-isolation", "strict",
			"-store", filepath.Join(t.TempDir(), "store"), "-shutdown-timeout", "1s", "-grace", "200ms",
			"-metrics-addr", fmt.Sprintf("127.0.0.1:%d", httpPort))
		return startCmd(t, argv)
	}

	t.Run("compose set", func(t *testing.T) {
		b := newBundle(t)
		httpPort := freeTCPPort(t)
		b.worker = start(t, b, caps, httpPort)
		waitLog(t, b.worker, "worker started", 30*time.Second)
		eff, bnd, err := procCaps(b.worker.cmd.Process.Pid)
		if want := capMask(caps); err != nil || eff != want || bnd != want {
			t.Fatalf("the worker's capabilities: effective %#x, bounding %#x, want %#x (%v)", eff, bnd, want, err)
		}
		rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "id -u; echo hello"]}]}`)
		if rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK || !strings.HasSuffix(stepOf(t, rec, 0).Stdout, "hello\n") {
			t.Fatalf("want completed/ok:\n%s", mustJSON(t, rec))
		}
		if rec.Isolation.Mode != "strict" || rec.Isolation.UID == 0 || !strings.HasPrefix(rec.Isolation.Network, "network namespace") {
			t.Errorf("isolation: %s", mustJSON(t, rec.Isolation))
		}
		checkClean(t, rec)

		if out, err := composeHealthcheck(t, c, httpPort).CombinedOutput(); err != nil {
			t.Errorf("the compose healthcheck fails against a ready worker: %v %s", err, out)
		}
		base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
		if code, body, err := httpGet(base + "/metrics"); err != nil || code != 200 ||
			!strings.Contains(body, `airlock_tasks_finished_total{queue="`+b.queue+`",state="completed",verdict="ok"} 1`) ||
			!strings.Contains(body, "airlock_slots "+flagValue(w.Command, "concurrency")) {
			t.Errorf("/metrics: %d %v:\n%s", code, err, body)
		}
	})

	for _, missing := range w.CapAdd {
		missing := normCap(missing)
		t.Run("without "+missing, func(t *testing.T) {
			b := newBundle(t)
			fewer := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == missing })
			b.worker = start(t, b, fewer, freeTCPPort(t))
			eventually(30*time.Second, func() bool {
				return exitOf(b.worker, 0) >= 0 || strings.Contains(b.worker.logs.String(), "worker started")
			})
			code := exitOf(b.worker, time.Second)
			logs := b.worker.logs.String()
			if code <= 0 || strings.Contains(logs, "worker started") {
				t.Fatalf("without %s the worker still starts (exit %d): cap_add lists a capability it does not need, or the emulation is wrong:\n%s", missing, code, logs)
			}
			t.Logf("without %s: exit %d: %s", missing, code, lastLine(logs))
		})
	}
}

// composeHealthcheck is the worker's healthcheck in docker-compose.yml,
// as Docker would run it in the container, its port changed to httpPort.
func composeHealthcheck(t *testing.T, c composeFile, httpPort int) *exec.Cmd {
	t.Helper()
	w := c.Services["worker"]
	_, port, err := net.SplitHostPort(flagValue(w.Command, "metrics-addr"))
	hc := w.Healthcheck.Test
	if err != nil || port == "" || len(hc) < 2 || hc[0] != "CMD" {
		t.Fatalf("worker healthcheck %v, -metrics-addr %q: want [CMD, ...] and -metrics-addr with a port", hc, flagValue(w.Command, "metrics-addr"))
	}
	var args []string
	for _, a := range hc[1:] {
		args = append(args, strings.ReplaceAll(a, port, strconv.Itoa(httpPort)))
	}
	return exec.Command(args[0], args[1:]...)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// redisServer is a redis-server of the test's own, on a fixed port.
type redisServer struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedisServer(t *testing.T, port int, password string) *redisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server")
	}
	dir := t.TempDir()
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--requirepass", password, "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) stop() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// TestWorkerWaitsForRedis: a worker started before its Redis retries with
// back-off, says so at warn with the address (never the password), serves
// /healthz but not /readyz meanwhile, and starts once Redis answers; then
// /metrics counts its task, and /readyz follows Redis going away.
func TestWorkerWaitsForRedis(t *testing.T) {
	t.Parallel()
	needRoot(t)
	const password = "pw-e2e-wait-7f3a9c"
	port, httpPort := freeTCPPort(t), freeTCPPort(t)
	url := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", password, port)
	queue := "t-wait-" + numMarker()
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	wp := startCmd(t, []string{bin.worker, "-redis", url, "-queues", queue, "-workspace-root", filepath.Join(tmp, "ws"),
		"-uid-lock-dir", filepath.Join(os.TempDir(), "airlock-e2e-uids"), "-store", filepath.Join(tmp, "store"),
		"-shutdown-timeout", "1s", "-grace", "200ms", "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", httpPort)})
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)

	// Two failures, each at warn with the address and the next delay.
	redacted := fmt.Sprintf(`"redis":"redis://:xxxxx@127.0.0.1:%d/0"`, port)
	warn := regexp.MustCompile(`"level":"warn".*` + regexp.QuoteMeta(redacted) + `.*"attempt":2,"retry_in":"[0-9.]+m?s".*cannot reach Redis; retrying`)
	if !eventually(20*time.Second, func() bool { return warn.MatchString(wp.logs.String()) }) {
		t.Fatalf("no second warning with the address and the next delay:\n%s", wp.logs.String())
	}
	if code, body, err := httpGet(base + "/healthz"); code != 200 || err != nil {
		t.Errorf("/healthz while waiting for Redis: %d %q %v", code, body, err)
	}
	if code, body, err := httpGet(base + "/readyz"); code != 503 || !strings.Contains(body, "waiting for Redis at redis://:xxxxx@127.0.0.1:") {
		t.Errorf("/readyz while waiting for Redis: %d %q %v", code, body, err)
	}
	compose := readCompose(t)
	if err := composeHealthcheck(t, compose, httpPort).Run(); err == nil {
		t.Error("the compose healthcheck passes while the worker waits for Redis")
	}

	redis := startRedisServer(t, port, password)
	waitLog(t, wp, "worker started", 60*time.Second)
	if !strings.Contains(wp.logs.String(), `"message":"Redis answers"`) {
		t.Errorf("no info line when Redis answered:\n%s", wp.logs.String())
	}
	c, err := airlock.Dial(url, airlock.ClientOptions{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := &bundle{t: t, queue: queue, url: url, client: c, worker: wp}
	rec := b.run(`{"version": 1, "steps": [{"run": ["echo", "hello"]}]}`)
	if rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK {
		t.Fatalf("want completed/ok:\n%s", mustJSON(t, rec))
	}
	if code, body, err := httpGet(base + "/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz once serving: %d %q %v", code, body, err)
	}
	if out, err := composeHealthcheck(t, compose, httpPort).CombinedOutput(); err != nil {
		t.Errorf("the compose healthcheck fails once the worker serves: %v %s", err, out)
	}
	code, body, err := httpGet(base + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^airlock_tasks_finished_total\{queue="` + queue + `",state="completed",verdict="ok"\} 1$`),
		regexp.MustCompile(`(?m)^airlock_task_duration_seconds_count\{queue="` + queue + `"\} 1$`),
		regexp.MustCompile(`(?m)^airlock_step_duration_seconds_count\{queue="` + queue + `"\} 1$`),
		regexp.MustCompile(`(?m)^airlock_redis_start_retries_total [1-9][0-9]*$`),
		regexp.MustCompile(`(?m)^airlock_slots 2$`),
		regexp.MustCompile(`(?m)^airlock_approvals_pending 0$`),
		regexp.MustCompile(`(?m)^airlock_helper_restarts_total 0$`),
		regexp.MustCompile(`(?m)^airlock_slots_busy 0$`),
		regexp.MustCompile(`(?m)^airlock_build_info\{.*version=".+"\} 1$`),
	} {
		if !want.MatchString(body) {
			t.Errorf("/metrics does not match %s:\n%s", want, body)
		}
	}
	if logs := wp.logs.String(); strings.Contains(logs, password) {
		t.Errorf("the logs hold the Redis password:\n%s", logs)
	}

	redis.stop()
	var last string
	if !eventually(10*time.Second, func() bool {
		code, body, _ := httpGet(base + "/readyz")
		last = fmt.Sprintf("%d %q", code, body)
		return code == 503 && strings.HasPrefix(body, "not ready: redis: ")
	}) {
		t.Errorf("/readyz with Redis stopped: %s, want 503 not ready: redis: ...", last)
	}
	if err := composeHealthcheck(t, compose, httpPort).Run(); err == nil {
		t.Error("the compose healthcheck passes with Redis stopped")
	}
	_ = wp.cmd.Process.Signal(syscall.SIGTERM)
	if code := exitOf(wp, 20*time.Second); code != 0 {
		t.Errorf("SIGTERM with Redis gone: exit %d, want 0", code)
	}
}

// TestWorkerStopsWhileWaitingForRedis: SIGTERM while Redis has never
// answered is a clean stop, exit 0.
func TestWorkerStopsWhileWaitingForRedis(t *testing.T) {
	t.Parallel()
	needRoot(t)
	tmp := t.TempDir()
	wp := startCmd(t, []string{bin.worker, "-redis", fmt.Sprintf("redis://127.0.0.1:%d/0", freeTCPPort(t)),
		"-workspace-root", filepath.Join(tmp, "ws"), "-uid-lock-dir", filepath.Join(os.TempDir(), "airlock-e2e-uids")})
	waitLog(t, wp, "cannot reach Redis; retrying", 20*time.Second)
	_ = wp.cmd.Process.Signal(syscall.SIGTERM)
	if code := exitOf(wp, 10*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, wp.logs.String())
	}
	if strings.Contains(wp.logs.String(), "worker started") {
		t.Errorf("started without Redis:\n%s", wp.logs.String())
	}
}
