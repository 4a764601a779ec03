//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/hibiken/asynq"
)

var bin struct {
	dir                     string
	worker, enqueu, approve string
	devWorker               string // cmd/worker with -dev; worker is the production build (airlock_nodev)
	probeDir                string // testdata/probe.c built, in a directory of its own; "" without a C compiler
	probeErr                string
}

func TestMain(m *testing.M) {
	if os.Getenv(measureEnv) != "" {
		os.Exit(measureChild()) // this binary re-executed as measuredRun's wrapper
	}
	dir, err := os.MkdirTemp("", "airlock-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.dir = dir
	os.Chmod(dir, 0o711) // the probe runs as slot uids too
	bin.worker, bin.enqueu, bin.approve = filepath.Join(dir, "worker"), filepath.Join(dir, "enqueue"), filepath.Join(dir, "approve")
	bin.devWorker = filepath.Join(dir, "worker-dev")
	// $AIRLOCK_E2E_BIN names a directory of prebuilt binaries, for a user
	// who cannot build here (CI's unprivileged pass builds: it has a Go
	// build cache of its own).
	prebuilt := os.Getenv("AIRLOCK_E2E_BIN")
	// The tests run the worker as it ships (Dockerfile: -tags airlock_nodev);
	// only the dev-mode test runs the build with -dev.
	for out, build := range map[string][]string{
		bin.worker:    {"-tags", "airlock_nodev", "../cmd/worker"},
		bin.devWorker: {"../cmd/worker"},
		bin.enqueu:    {"../cmd/enqueue"},
		bin.approve:   {"../cmd/approve"},
	} {
		pkg := build[len(build)-1]
		cmd := exec.Command("go", append([]string{"build", "-o", out}, build...)...)
		if prebuilt != "" {
			cmd = exec.Command("cp", filepath.Join(prebuilt, filepath.Base(out)), out)
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", pkg, err)
			os.Exit(1)
		}
	}
	buildProbe(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bundle is one test's world: a queue, a client, and its worker process.
type bundle struct {
	t      *testing.T
	queue  string
	url    string
	client *airlock.Client
	root   string // workspace root of the worker
	worker *workerProc
	extra  []*os.File // descriptors the worker inherits (fd 3, 4...)
	// workerDir is the worker's working directory ("": the test's).
	workerDir string
}

type workerProc struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
}

// lockedBuffer collects log lines its writers append concurrently.
type lockedBuffer = logtest.Buffer

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the worker's strict isolation (uid per slot, namespaces, tmpfs quota) needs it; CI runs as root")
	}
}

// setup gives a test its queue and a running worker with extra flags.
func setup(t *testing.T, flags ...string) *bundle {
	t.Helper()
	return setupInherit(t, nil, flags...)
}

// setupInherit is setup with a worker that inherits extra descriptors, as
// a worker started carelessly by a supervisor would: fd 3, 4...
func setupInherit(t *testing.T, extra []*os.File, flags ...string) *bundle {
	t.Helper()
	needRoot(t)
	b := newBundle(t)
	b.extra = extra
	b.worker = b.startWorker(flags...)
	return b
}

// newBundle gives a test its queue, client and workspace root, with no
// worker yet.
func newBundle(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{t: t, queue: redistest.Queue(t), url: redistest.URL(t)}
	b.client = airlock.NewClient(redistest.Client(t), airlock.ClientOptions{Retention: time.Hour})
	t.Cleanup(func() { b.client.Close() })
	tmp := t.TempDir()
	// Slot uids must be able to walk down to their workspaces.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	b.root = filepath.Join(tmp, "ws")
	return b
}

func (b *bundle) startWorker(flags ...string) *workerProc {
	b.t.Helper()
	// A store of the test's own (a -store in flags wins: the last one
	// given), not the default one of the machine.
	args := append([]string{
		"-redis", b.url, "-queues", b.queue, "-workspace-root", b.root,
		"-uid-lock-dir", filepath.Join(os.TempDir(), "airlock-e2e-uids"),
		"-shutdown-timeout", "1s", "-grace", "200ms", "-store", filepath.Join(filepath.Dir(b.root), "store"),
		"-session-store", filepath.Join(filepath.Dir(b.root), "sessions"),
	}, flags...)
	cmd := exec.Command(bin.worker, args...)
	cmd.ExtraFiles, cmd.Dir = b.extra, b.workerDir
	logs := &lockedBuffer{}
	cmd.Stderr, cmd.Stdout = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	wp := &workerProc{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(wp.done) }()
	b.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-wp.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-wp.done
		}
		if b.t.Failed() {
			b.t.Logf("worker logs:\n%s", logs.String())
		}
	})
	// Ready once it logged that it serves.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "worker started") {
		select {
		case <-wp.done:
			b.t.Fatalf("worker exited at start:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("worker not ready after 20s:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return wp
}

// buildProbe compiles internal/isolation/sandbox/testdata/probe.c into dir/probe/probe, a directory
// the tests bind into the steps' view.
func buildProbe(dir string) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		bin.probeErr = "no C compiler: " + err.Error()
		return
	}
	pd := filepath.Join(dir, "probe")
	if err := os.Mkdir(pd, 0o755); err != nil {
		bin.probeErr = err.Error()
		return
	}
	out, err := exec.Command(cc, "-O1", "-o", filepath.Join(pd, "probe"), "../internal/isolation/sandbox/testdata/probe.c").CombinedOutput()
	if err != nil {
		bin.probeErr = fmt.Sprintf("cc internal/isolation/sandbox/testdata/probe.c: %v\n%s", err, out)
		return
	}
	bin.probeDir = pd
}

// probeBind is the -ro-bind flag that puts the probe at /opt/airlock-probe/probe.
func probeBind(t *testing.T) []string {
	t.Helper()
	if bin.probeDir == "" {
		t.Skipf("no probe: %s", bin.probeErr)
	}
	return []string{"-ro-bind", bin.probeDir + ":/opt/airlock-probe"}
}

// spec builds a spec on the test's queue from JSON with the queue filled in.
func (b *bundle) spec(js string) *tasks.Spec {
	b.t.Helper()
	s, err := tasks.Decode([]byte(js))
	if err != nil {
		b.t.Fatalf("spec: %v", err)
	}
	s.Queue = b.queue
	return s
}

// run enqueues a spec and waits for its record.
func (b *bundle) run(js string) *record.Run {
	b.t.Helper()
	e, err := b.client.Enqueue(context.Background(), b.spec(js))
	if err != nil {
		b.t.Fatalf("enqueue: %v", err)
	}
	return b.wait(e.TaskID)
}

func (b *bundle) wait(taskID string) *record.Run {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, err := b.client.Wait(ctx, b.queue, taskID)
	if err != nil {
		b.t.Fatalf("wait: %v\nworker logs:\n%s", err, b.worker.logs.String())
	}
	return rec
}

// procsMatching lists the pids on the whole machine whose command line
// contains marker.
func procsMatching(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(cl, []byte(marker)) {
			out = append(out, e.Name()+":"+strings.ReplaceAll(string(cl), "\x00", " "))
		}
	}
	return out
}

// numMarker returns four random digits, to find a test's processes by
// their command line.
func numMarker() string { return fmt.Sprintf("%04d", rand.IntN(10000)) }

// procsOfUID lists the processes running as uid, slot helpers aside.
func procsOfUID(uid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		f, err := os.Open(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 1 && fields[0] == "Uid:" && fields[1] == fmt.Sprint(uid) {
				cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				if !bytes.Contains(cl, []byte("__airlock_slot_helper")) {
					out = append(out, e.Name()+":"+strings.ReplaceAll(string(cl), "\x00", " "))
				}
			}
		}
		f.Close()
	}
	return out
}

// stepUID reads the uid a step ran as from its stdout ("id -u" first line).
func mustJSON(t *testing.T, v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eventually polls cond for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// runRaw enqueues a payload as is, past the client's checks, as an
// untrusted enqueuer could, and waits for its record.
func (b *bundle) runRaw(payload string) *record.Run {
	b.t.Helper()
	c := asynq.NewClientFromRedisClient(redistest.Client(b.t))
	info, err := c.Enqueue(asynq.NewTask(tasks.TypeRun, []byte(payload)), asynq.Queue(b.queue), asynq.Retention(time.Hour))
	if err != nil {
		b.t.Fatal(err)
	}
	return b.wait(info.ID)
}

// approveCLI runs the approve binary.
func (b *bundle) approveCLI(args ...string) (int, string, string) {
	b.t.Helper()
	return b.runBin(bin.approve, "", args...)
}

// enqueueCLI runs the enqueue binary and returns its exit code and output.
func (b *bundle) enqueueCLI(stdin string, args ...string) (int, string, string) {
	b.t.Helper()
	return b.runBin(bin.enqueu, stdin, args...)
}

func (b *bundle) runBin(path, stdin string, args ...string) (int, string, string) {
	b.t.Helper()
	cmd := exec.Command(path, append([]string{"-redis", b.url}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		b.t.Fatal(err)
	}
	return code, out.String(), errb.String()
}
