package mcpserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/internal/testkit/mcptest"
	"github.com/airlock-run/airlock/record"
)

// strictIsolation is a worker's isolation as a record says it.
var strictIsolation = record.Isolation{Mode: "strict", User: "uid per slot from 200000", UID: 200001,
	Network: "network namespace (loopback only)", Root: "pivot_root: own tree (ro /usr; generated /etc; /dev minimal; /proc masked; /workspace)",
	Landlock: "abi 7 (writes only in the workspace, reads only in the view, tcp denied, signals and abstract sockets scoped)",
	Seccomp:  "airlock-default: 65 rules (denied calls fail with EPERM; other ABIs killed)",
	IPC:      "ipc namespace per slot; SysV objects and POSIX queues removed after each step",
	Keys:     "key calls denied (seccomp); own empty session keyring; the slot uid's keyrings cleared at start",
	FDs:      "closed: steps get only stdin, stdout and stderr", Quota: "tmpfs per slot, sized to each task's quota",
	Tree: "pid namespace (kill -1 from its init)", Rlimits: "prlimit while stopped at exec (ptrace)",
	Memory: "cgroup v2 memory and pids, one group per slot", Validation: "in the worker up to 10000 units of work"}

// A record's answer is compact unless full: true asks for the whole: its
// isolation {mode, uid, off, uri}, the tiers' text in the resource at
// uri (and in IsolationURI, by id); a step's empty stderr, byte counts
// and flags left out when the record kept all, kept_output left out when
// nothing was dropped. A best-effort worker's off tiers are named.
func TestCompactRecord(t *testing.T) {
	rec := &record.Run{TaskID: "t1", RunID: "r1", Queue: "default", Principal: DefaultPrincipal, State: record.StateCompleted, Verdict: record.VerdictOK,
		Isolation:  strictIsolation,
		KeptOutput: &record.KeptOutput{MaxBytes: 1 << 20, Bytes: 3},
		Steps: []record.Step{
			{Name: "a", Argv: []string{"true"}, Verdict: record.VerdictOK, Stdout: "hi\n", StdoutBytes: 3},
			{Name: "b", Argv: []string{"yes"}, Verdict: record.VerdictOutputLimit, Stdout: "y\ny\n", StdoutBytes: 1 << 20, StdoutTruncated: true, Stderr: "e", StderrBytes: 1},
		}}
	be := *rec
	be.TaskID = "t2"
	be.Isolation = strictIsolation
	be.Isolation.Mode, be.Isolation.Landlock, be.Isolation.Seccomp = "best-effort", "off: not supported by the kernel", "off: not built"
	fc := &fakeClient{runs: map[string]*record.Run{"t1": rec, "t2": &be}}
	cs := connect(t, fc, Options{}, nil)

	fullRes, full := callTool(t, cs, ToolGetRun, `{"task_id": "t1", "full": true}`)
	compactRes, compact := callTool(t, cs, ToolGetRun, `{"task_id": "t1"}`)
	if fullRes.IsError || compactRes.IsError {
		t.Fatalf("get_run: %v / %v", full, compact)
	}
	fullText, compactText := fullRes.Content[0].(*mcp.TextContent).Text, compactRes.Content[0].(*mcp.TextContent).Text
	t.Logf("get_run answer: %d bytes full, %d compact", len(fullText), len(compactText))
	if len(compactText) > len(fullText)/2 {
		t.Errorf("compact answer %d bytes, full %d: want at most half", len(compactText), len(fullText))
	}

	// The full record is the record.
	var whole struct {
		Record *record.Run `json:"record"`
	}
	if err := json.Unmarshal([]byte(fullText), &whole); err != nil || !reflect.DeepEqual(whole.Record, rec) {
		t.Errorf("full: true: %s, want the record %+v (%v)", fullText, rec, err)
	}

	r := compact["record"].(map[string]any)
	iso := r["isolation"].(map[string]any)
	uri, _ := iso["uri"].(string)
	if len(iso) != 3 || iso["mode"] != "strict" || iso["uid"] != 200001.0 || !strings.HasPrefix(uri, IsolationURI+"/") {
		t.Errorf("compact isolation %v, want {mode, uid, uri}", iso)
	}
	if _, ok := r["kept_output"]; ok || r["task_id"] != "t1" || r["state"] != "completed" || r["run_id"] != "r1" {
		t.Errorf("compact record %v", r)
	}
	steps := r["steps"].([]any)
	a, b := steps[0].(map[string]any), steps[1].(map[string]any)
	for _, k := range []string{"stderr", "stdout_bytes", "stderr_bytes", "stdout_truncated", "stderr_truncated"} {
		if _, ok := a[k]; ok {
			t.Errorf("step a has %s: %v", k, a)
		}
	}
	if a["stdout"] != "hi\n" || a["exit_code"] != nil || a["verdict"] != "ok" {
		t.Errorf("step a %v", a)
	}
	if b["stdout_bytes"] != float64(1<<20) || b["stdout_truncated"] != true || b["stderr"] != "e" || b["stderr_bytes"] != nil {
		t.Errorf("step b (truncated) %v", b)
	}

	// The tiers' text: at uri, and in IsolationURI by id; the uid, which
	// differs from run to run, is in the record only.
	text, err := mcptest.ReadResource(t, cs, uri, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	want := strictIsolation
	want.UID = 0
	var got record.Isolation
	if err := json.Unmarshal([]byte(text), &got); err != nil || got != want || strings.Contains(text, `"uid"`) {
		t.Errorf("%s: %s, want %+v", uri, text, want)
	}
	var all map[string]record.Isolation
	if text, err = mcptest.ReadResource(t, cs, IsolationURI, "application/json"); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(text), &all); err != nil || len(all) != 1 || all[strings.TrimPrefix(uri, IsolationURI+"/")] != want {
		t.Errorf("%s: %s (%v)", IsolationURI, text, err)
	}
	if _, err := mcptest.ReadResource(t, cs, IsolationURI+"/000000000000", "application/json"); err == nil || !strings.Contains(err.Error(), "full: true") {
		t.Errorf("an isolation never answered about: %v", err)
	}

	// Another run of the same worker: the same uri. A best-effort one: its
	// own, naming its off tiers.
	rec2 := *rec
	rec2.TaskID, rec2.Isolation.UID = "t3", 200007
	fc.runs["t3"] = &rec2
	if _, out := callTool(t, cs, ToolGetRun, `{"task_id": "t3"}`); out["record"].(map[string]any)["isolation"].(map[string]any)["uri"] != uri {
		t.Errorf("the same tiers, another uid: %v, want uri %s", out["record"], uri)
	}
	_, out := callTool(t, cs, ToolWaitRun, `{"task_id": "t2"}`)
	iso = out["record"].(map[string]any)["isolation"].(map[string]any)
	if iso["mode"] != "best-effort" || iso["uri"] == uri || !reflect.DeepEqual(iso["off"], []any{"landlock", "seccomp"}) {
		t.Errorf("best-effort isolation %v", iso)
	}
	if text, _ := mcptest.ReadResource(t, cs, IsolationURI, "application/json"); strings.Count(text, `"mode"`) != 2 {
		t.Errorf("%s after two workers' runs: %s", IsolationURI, text)
	}

	// A pending run has no isolation yet: none in its answer.
	fc.runs["t4"] = &record.Run{TaskID: "t4", Queue: "default", Principal: DefaultPrincipal, State: "pending", Attempt: 1}
	if _, out := callTool(t, cs, ToolGetRun, `{"task_id": "t4"}`); out["record"].(map[string]any)["isolation"] != nil || out["record"].(map[string]any)["steps"] != nil {
		t.Errorf("pending run: %v", out["record"])
	}
	if res, out := callTool(t, cs, ToolGetResult, `{"task_id": "t1", "full": true}`); !res.IsError || out["field"] != "full" {
		t.Errorf("get_result takes no full: %v", out)
	}
}

// The isolations kept are bounded: the oldest go first.
func TestIsolationsBounded(t *testing.T) {
	var c isolations
	first := c.add(strictIsolation)
	if again := c.add(record.Isolation{Mode: "strict", User: strictIsolation.User, UID: 7, Network: strictIsolation.Network,
		Root: strictIsolation.Root, Landlock: strictIsolation.Landlock, Seccomp: strictIsolation.Seccomp, IPC: strictIsolation.IPC,
		Keys: strictIsolation.Keys, FDs: strictIsolation.FDs, Quota: strictIsolation.Quota, Tree: strictIsolation.Tree,
		Rlimits: strictIsolation.Rlimits, Memory: strictIsolation.Memory, Validation: strictIsolation.Validation}); again != first {
		t.Errorf("the same tiers with another uid: id %s, want %s", again, first)
	}
	ids := make([]string, maxIsolations)
	for i := range maxIsolations {
		iso := strictIsolation
		iso.Network = strings.Repeat("x", i+1)
		ids[i] = c.add(iso)
	}
	if _, ok := c.get(first); ok || len(c.all()) != maxIsolations {
		t.Errorf("after %d more: the first kept %v, %d kept", maxIsolations, ok, len(c.all()))
	}
	// One cited again is the most recent: the next new one evicts the
	// least recently cited ("xx"), not it ("x", the oldest added).
	net := func(n string) record.Isolation { iso := strictIsolation; iso.Network = n; return iso }
	x, xx := ids[0], ids[1]
	if again := c.add(net("x")); again != x {
		t.Fatalf("x cited again: id %s, want %s", again, x)
	}
	c.add(net("new"))
	if _, ok := c.get(x); !ok {
		t.Error("an isolation cited again was evicted before older ones")
	}
	if _, ok := c.get(xx); ok {
		t.Error("the least recently cited isolation was kept past the bound")
	}
}
