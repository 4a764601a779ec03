package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestPrincipalFlag checks -principal: stamped on the enqueued spec, a
// spec naming another refused naming principal, a bad name refused as a
// flag.
func TestPrincipalFlag(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	got := enqueueCmd(t, validSpec, "-", "-queue", q, "-principal", "nightly-batch")
	id := strings.TrimSpace(got.Stdout)
	if got.Code != 0 || id == "" {
		t.Fatalf("enqueue -principal nightly-batch: %+v", got)
	}
	info, err := asynq.NewInspectorFromRedisClient(redistest.Client(t)).GetTaskInfo(q, id)
	if err != nil {
		t.Fatal(err)
	}
	var payload struct {
		Principal string `json:"principal"`
	}
	if err := json.Unmarshal(info.Payload, &payload); err != nil || payload.Principal != "nightly-batch" {
		t.Errorf("payload's principal %q, %v; want nightly-batch", payload.Principal, err)
	}
	other := `{"version": 1, "principal": "someone-else", "steps": [{"run": ["true"]}]}`
	got = enqueueCmd(t, other, "-", "-queue", q, "-principal", "nightly-batch")
	if got.Code != 2 || !strings.HasPrefix(got.Stderr, `enqueue: spec rejected: principal: "someone-else": this client enqueues for "nightly-batch" only`) {
		t.Errorf("a spec naming another principal: %+v", got)
	}
	got = enqueueCmd(t, validSpec, "-", "-queue", q, "-principal", "a b")
	if got.Code != 2 || !strings.Contains(got.Stderr, `-principal "a b": want 1-64 of [A-Za-z0-9._@+-]`) {
		t.Errorf("-principal \"a b\": %+v", got)
	}
}
