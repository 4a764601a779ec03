package airlock_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/tasks"
)

// TestIdempotentTaskIDPerPrincipal checks that the task id of a key is
// scoped per principal, and that a spec naming no principal keeps the id
// it had before principals (SHA-256 of queue, NUL, key).
func TestIdempotentTaskIDPerPrincipal(t *testing.T) {
	sum := sha256.Sum256([]byte("payments\x00order-1"))
	old := "ik-" + hex.EncodeToString(sum[:])[:40]
	if got := airlock.IdempotentTaskIDFor("payments", "", "order-1"); got != old || airlock.IdempotentTaskID("payments", "order-1") != old {
		t.Errorf("no principal: %s, want the former id %s", got, old)
	}
	alice := airlock.IdempotentTaskIDFor("payments", "alice", "order-1")
	for _, other := range []string{
		old,
		airlock.IdempotentTaskIDFor("payments", "bob", "order-1"),
		airlock.IdempotentTaskIDFor("refunds", "alice", "order-1"),
		airlock.IdempotentTaskIDFor("payments", "alice", "order-2"),
		// The principal and key are not run together.
		airlock.IdempotentTaskIDFor("payments", "alic", "eorder-1"),
	} {
		if other == alice {
			t.Errorf("alice's id %s is another's too", alice)
		}
	}
}

// TestEnqueuePrincipal checks ClientOptions.Principal: stamped on the
// spec (and its payload), a spec naming another principal refused, two
// principals with one key two tasks, one principal its own task again.
func TestEnqueuePrincipal(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	ctx := context.Background()
	alice := newClient(t, airlock.ClientOptions{Principal: "alice"})
	bob := newClient(t, airlock.ClientOptions{Principal: "bob"})
	anyone := newClient(t, airlock.ClientOptions{})
	enqueue := func(c *airlock.Client, principal string) (airlock.Enqueued, error) {
		s := newSpec(q)
		s.IdempotencyKey, s.Principal = "order-1", principal
		return c.Enqueue(ctx, s)
	}
	a1, err := enqueue(alice, "")
	if err != nil {
		t.Fatal(err)
	}
	if a1.Duplicate || a1.TaskID != airlock.IdempotentTaskIDFor(q, "alice", "order-1") {
		t.Errorf("alice: %+v", a1)
	}
	info, err := inspector(t).GetTaskInfo(q, a1.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	var payload struct {
		Principal string `json:"principal"`
	}
	if err := json.Unmarshal(info.Payload, &payload); err != nil || payload.Principal != "alice" {
		t.Errorf("payload's principal %q, %v; want alice", payload.Principal, err)
	}
	b1, err := enqueue(bob, "")
	if err != nil || b1.Duplicate || b1.TaskID == a1.TaskID {
		t.Errorf("bob's same key: %+v, %v; want a task of his own", b1, err)
	}
	if a2, err := enqueue(alice, "alice"); err != nil || !a2.Duplicate || a2.TaskID != a1.TaskID || a2.RunID != a1.RunID {
		t.Errorf("alice's same key again: %+v, %v; want her task", a2, err)
	}
	_, err = enqueue(alice, "bob")
	var fe *tasks.FieldError
	if !errors.As(err, &fe) || fe.Field != "principal" || !tasks.IsInvalid(err) {
		t.Errorf("alice's client, a spec naming bob: %v; want a field error on principal", err)
	}
	// A client that names nobody keeps a spec's principal, checked.
	if n, err := enqueue(anyone, "carol"); err != nil || n.TaskID != airlock.IdempotentTaskIDFor(q, "carol", "order-1") {
		t.Errorf("unstamped client, principal carol: %+v, %v", n, err)
	}
	if _, err := enqueue(anyone, "no spaces"); !errors.As(err, &fe) || fe.Field != "principal" {
		t.Errorf("principal with a space: %v; want a field error on principal", err)
	}
}
