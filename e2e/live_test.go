//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/live"
	"github.com/airlock-run/airlock/tasks"
)

// tickStep prints "tick N <unix time>" every 0.5 s, six times, and the
// secret's value once (redacted live as in the record).
var tickStep = tasks.Step{Name: "ticks", Run: []string{"sh", "-c",
	`for i in 1 2 3 4 5 6; do echo "tick $i $(date +%s.%N)"; sleep 0.5; done`}}

// ticks checks pieces of live output: every tick once, in order, each
// within 1 s of being printed; it returns the ticks seen.
func ticks(t *testing.T, who string, outs []live.Output, got []time.Time) int {
	t.Helper()
	var text strings.Builder
	for _, o := range outs {
		if o.Step != "ticks" || o.Stream != "stdout" {
			t.Errorf("%s: a piece %+v", who, o)
		}
		text.WriteString(o.Data)
	}
	n := 0
	for i, line := range strings.Split(strings.TrimSpace(text.String()), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != strconv.Itoa(i+1) {
			t.Errorf("%s: line %d %q (gaps or repeats?)", who, i+1, line)
			continue
		}
		n++
		printed, _ := strconv.ParseFloat(f[2], 64)
		if i < len(got) {
			if lag := got[i].Sub(time.Unix(0, int64(printed*1e9))); lag > time.Second {
				t.Errorf("%s: tick %d reached it %s after it was printed", who, i+1, lag)
			} else if i == 0 {
				t.Logf("%s: the first tick reached it %s after it was printed", who, lag.Round(time.Millisecond))
			}
		}
	}
	return n
}

// TestLiveOutput: a step printing a line every 0.5 s for 3 s reaches an
// SSE listener (which reconnects with Last-Event-ID midway: no gap, no
// repeat) and a Go callback while it runs, each line within 1 s.
func TestLiveOutput(t *testing.T) {
	b := setup(t)
	api := &apiClient{t: t, base: startAPI(t, b), c: &http.Client{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var opened struct {
		SessionID string `json:"session_id"`
	}
	api.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "2m", "session": map[string]any{}}, 201, &opened)
	id := opened.SessionID

	// An SSE listener, which drops its connection after its second
	// piece and comes back with the last id it saw.
	var mu sync.Mutex
	var sseOuts []live.Output
	var sseAt []time.Time
	listen := func(lastID string, stopAfter int) string {
		req, _ := http.NewRequestWithContext(ctx, "GET", api.base+"/v1/runs/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+apiAgent)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := api.c.Do(req)
		if err != nil {
			t.Errorf("events: %v", err)
			return lastID
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var name, evID string
		n := 0
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				evID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: ") && name == "output":
				var o live.Output
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &o); err != nil || o.Seq != evID {
					t.Errorf("output event %q (id %s): %v", line, evID, err)
				}
				mu.Lock()
				for range strings.Count(o.Data, "\n") {
					sseAt = append(sseAt, time.Now())
				}
				sseOuts = append(sseOuts, o)
				mu.Unlock()
				lastID = evID
				if n++; n == stopAfter {
					return lastID
				}
			case line == "":
				name, evID = "", ""
			}
			mu.Lock()
			done := strings.Count(joinData(sseOuts), "\n") >= 6
			mu.Unlock()
			if done {
				return lastID
			}
		}
		return lastID
	}
	sseDone := make(chan struct{})
	go func() {
		defer close(sseDone)
		last := listen("", 2)
		listen(last, 0)
	}()
	time.Sleep(300 * time.Millisecond) // the listener is there

	// The same step's output through the Go client's callback.
	s, _, err := b.client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var goOuts []live.Output
	var goAt []time.Time
	st, err := s.Run(ctx, tickStep, airlock.OnOutput(func(o live.Output) {
		goOuts = append(goOuts, o)
		for range strings.Count(o.Data, "\n") {
			goAt = append(goAt, time.Now())
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if n := ticks(t, "Go OnOutput", goOuts, goAt); n != 6 || joinData(goOuts) != st.Stdout {
		t.Errorf("Go OnOutput: %d ticks; %q, the record's stdout %q", n, joinData(goOuts), st.Stdout)
	}
	select {
	case <-sseDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the SSE listener did not see every tick")
	}
	mu.Lock()
	if n := ticks(t, "SSE", sseOuts, sseAt); n != 6 {
		t.Errorf("SSE: %d ticks", n)
	}
	mu.Unlock()
	if status, _, body := api.do("DELETE", "/v1/sessions/"+id, apiAgent, nil, nil); status != 200 {
		t.Errorf("delete: %d %s", status, body)
	}
}

func joinData(outs []live.Output) string {
	var b strings.Builder
	for _, o := range outs {
		b.WriteString(o.Data)
	}
	return b.String()
}

// TestLiveOutputMCP: run_in_session with a progress token: the step's
// output lines reach the MCP client as progress notifications while the
// step runs, each within 1 s of being printed.
func TestLiveOutputMCP(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	var outs []live.Output
	var at []time.Time
	cs := mcpStdioOpts(t, b, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		outs = append(outs, live.Output{Step: "ticks", Stream: "stdout", Data: r.Params.Message})
		for range strings.Count(r.Params.Message, "\n") {
			at = append(at, time.Now())
		}
	}}, "-principal", "agent-mcp")
	open := call(t, cs, "open_session", `{"spec": {"version": 1, "timeout": "60s", "session": {}}}`, false)
	var opened struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(open.raw, &opened); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args, _ := json.Marshal(map[string]any{"session_id": opened.SessionID, "name": "ticks", "run": tickStep.Run})
	params := &mcp.CallToolParams{Name: "run_in_session", Arguments: json.RawMessage(args)}
	params.SetProgressToken("ticks-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("run_in_session: %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := ticks(t, "MCP progress", outs, at); n != 6 {
		t.Errorf("MCP progress: %d ticks", n)
	}
}
