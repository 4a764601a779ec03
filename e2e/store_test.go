//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestResultFromAnotherDirectory: a worker started in one directory with
// a relative -store publishes to it made absolute, and announces it; the
// real enqueue -result and MCP get_result, run from another directory
// (as an agent host starts mcp in its own), read the promoted output
// there. Once the worker stops, its announcement is withdrawn and enqueue
// warns that no worker serves the queue (exit 0).
func TestResultFromAnotherDirectory(t *testing.T) {
	t.Parallel()
	needRoot(t)
	b := newBundle(t)
	workerDir, readerDir := t.TempDir(), t.TempDir()
	b.workerDir = workerDir
	b.worker = b.startWorker("-store", "airlock-store", "-policy", writePolicy(t, `{"default": "promote"}`))
	store := filepath.Join(workerDir, "airlock-store")

	spec, err := tasks.Decode([]byte(reportSpec(`{"total": 4}`, `"run_id": "far-1",`)))
	if err != nil {
		t.Fatal(err)
	}
	spec.Queue = b.queue
	spec.Principal = "mcp" // the MCP server's below (its default -principal) reads its own runs only
	e, err := b.client.Enqueue(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if e.NoWorker {
		t.Errorf("Enqueue says no worker serves %s, with the worker running", b.queue)
	}
	rec := b.wait(e.TaskID)
	where := filepath.Join(store, "far-1", e.TaskID)
	if rec.State != record.StatePromoted || rec.PublishedTo != where {
		t.Fatalf("record: state %s, published_to %q; want promoted to %s", rec.State, rec.PublishedTo, where)
	}
	workers, err := queuepolicy.LoadWorkers(context.Background(), redistest.Client(t), "", b.queue, time.Now())
	if err != nil || len(workers) != 1 || workers[0].Store != store || workers[0].Version != airlock.Version {
		t.Errorf("announced workers of %s: %+v, %v; want one, with store %s", b.queue, workers, err, store)
	}

	// enqueue -result, run elsewhere.
	cmd := exec.Command(bin.enqueu, "-redis", b.url, "-result", e.TaskID)
	cmd.Dir = readerDir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("enqueue -result from %s: %v\n%s", readerDir, err, errOut.String())
	}
	var pub struct {
		Where  string
		Result struct{ Total int }
	}
	if err := json.Unmarshal(out.Bytes(), &pub); err != nil || pub.Where != where || pub.Result.Total != 4 {
		t.Errorf("enqueue -result: %s (%v); want the result read in %s", out.String(), err, where)
	}

	// MCP's get_result, the server started elsewhere.
	mc := exec.Command(buildMCP(t), "-redis", b.url, "-queue", b.queue)
	mc.Dir = readerDir
	mc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "airlock-e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: mc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := call(t, cs, "get_result", `{"task_id": "`+e.TaskID+`"}`, false)
	if err := json.Unmarshal(got.raw, &pub); err != nil || pub.Where != where || pub.Result.Total != 4 {
		t.Errorf("get_result: %s", got.text())
	}
	if err := cs.Close(); err != nil {
		t.Error(err)
	}

	// The worker stops: its announcement goes with it.
	_ = b.worker.cmd.Process.Signal(syscall.SIGTERM)
	<-b.worker.done
	if workers, err := queuepolicy.LoadWorkers(context.Background(), redistest.Client(t), "", b.queue, time.Now()); err != nil || len(workers) != 0 {
		t.Errorf("workers of %s after the worker stopped: %+v, %v", b.queue, workers, err)
	}
	code, stdout, stderr := b.enqueueCLI(`{"version": 1, "steps": [{"run": ["true"]}]}`, "-queue", b.queue, "-")
	id := strings.TrimSpace(stdout)
	want := "enqueue: warning: no worker serves queue \"" + b.queue + "\" (none announced itself in the last 30s): task " + id +
		" waits until one starts (worker -queues " + b.queue + ")\n"
	if code != 0 || id == "" || stderr != want {
		t.Errorf("enqueue with no worker: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
}
