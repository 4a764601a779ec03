//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/frontend/webhook"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// TestAPIWebhooks: the API server started with -webhook signs and delivers
// approval.pending when the real worker parks a run, and run.final once
// the run is accepted and promoted.
func TestAPIWebhooks(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	key, err := webhook.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	type delivery struct {
		Type string `json:"type"`
		Data struct {
			TaskID     string `json:"task_id"`
			ApprovalID string `json:"approval_id"`
			State      string `json:"state"`
		} `json:"data"`
	}
	var mu sync.Mutex
	var got []delivery
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(key, r.Header, body, 5*time.Minute); err != nil {
			t.Errorf("delivery does not verify: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var d delivery
		if err := json.Unmarshal(body, &d); err != nil {
			t.Errorf("delivery body %q: %v", body, err)
		}
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)

	// A prefix of the test's own: its events stream, consumer group and
	// approvals are no other test's.
	prefix := "whtest-" + redistest.Queue(t) + ":"
	store := t.TempDir()
	b := setup(t, "-prefix", prefix, "-store", store)
	client := airlock.NewClient(redistest.Client(t), airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	startAPI(t, b, "-prefix", prefix, "-webhook", recv.URL+",secret="+secret+",events=approval.pending|run.final")
	time.Sleep(300 * time.Millisecond) // the consumer group starts at the stream's end

	e, err := client.Enqueue(context.Background(), b.spec(reportSpec(`{"total": 3}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := client.Wait(ctx, b.queue, e.TaskID)
	if err != nil || rec.State != record.StateParked {
		t.Fatalf("want parked: %v %s", err, mustJSON(t, rec))
	}
	find := func(typ, state string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range got {
			if d.Type == typ && d.Data.TaskID == e.TaskID && (state == "" || d.Data.State == state) {
				return true
			}
		}
		return false
	}
	if !eventually(30*time.Second, func() bool { return find("approval.pending", "") }) {
		t.Fatalf("no approval.pending delivered; got %+v", got)
	}
	if code, out, errs := b.approveCLI("-prefix", prefix, "accept", rec.ApprovalID, "-by", "alice"); code != 0 {
		t.Fatalf("accept: %d %s %s", code, out, errs)
	}
	if !eventually(30*time.Second, func() bool { return find("run.final", "promoted") }) {
		t.Fatalf("no run.final promoted delivered; got %+v", got)
	}
}
