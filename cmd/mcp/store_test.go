package main

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestGetResultStore: with -store, get_result reads the output in that
// store, not where the run's record says (which an agent host's directory
// does not see); without it, the error names -store.
func TestGetResultStore(t *testing.T) {
	q, store := redistest.Queue(t), t.TempDir()
	taskID := redistest.PromotedElsewhere(t, q, store, "mcp") // the server's (its default -principal)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, withStore := range []bool{true, false} {
		args := []string{"-redis", redistest.URL(t), "-queue", q}
		if withStore {
			args = append(args, "-store", store)
		}
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		var stderr syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Run(ctx, args, inR, outW, &stderr)
			outW.Close()
		}()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v := cs.InitializeResult().ServerInfo.Version; v != airlock.Version {
			t.Errorf("the MCP server says version %q, the commands %q", v, airlock.Version)
		}
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_result", Arguments: map[string]any{"task_id": taskID}})
		if err != nil {
			t.Fatal(err)
		}
		text := ""
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if withStore {
			var out struct{ Where string }
			if r.IsError || json.Unmarshal([]byte(text), &out) != nil || out.Where != filepath.Join(store, "r1", taskID) {
				t.Errorf("get_result with -store: %s", text)
			}
		} else if !r.IsError || !strings.Contains(text, "holds no manifest") || !strings.Contains(text, "-store") {
			t.Errorf("get_result without -store: %s", text)
		}
		if err := cs.Close(); err != nil {
			t.Fatal(err)
		}
		if code := <-done; code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	}
}

// TestVersion: -version prints the one version string (the MCP server
// says the same: TestGetResultStore).
func TestVersion(t *testing.T) {
	if code, out, errOut := runArgs(t, "-version"); code != 0 || out != airlock.Version+"\n" || errOut != "" {
		t.Errorf("-version: exit %d, %q, %q", code, out, errOut)
	}
}
