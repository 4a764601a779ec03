package airlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/tasks"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Enqueue a spec and wait for its run record. A worker must serve the
// queue, so this example is not run.
func Example() {
	ctx := context.Background()
	c, err := airlock.Dial("redis://127.0.0.1:6379/0", airlock.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	spec, err := tasks.Decode([]byte(`{
		"version": 1,
		"queue": "reports",
		"timeout": "2m",
		"files": {"in.csv": "a,b\n1,2\n"},
		"steps": [{"run": ["sh", "-c", "wc -l in.csv > out/count.txt"]}],
		"limits": {"memory": "256MiB"}
	}`))
	if err != nil {
		log.Fatal(err) // a *tasks.FieldError naming the field
	}
	enq, err := c.Enqueue(ctx, spec)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	run, err := c.Wait(ctx, enq.Queue, enq.TaskID)
	if err != nil {
		log.Fatal(err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(run) // state, verdict, steps...
}

// A spec with an idempotency_key is enqueued once: enqueueing it again
// returns the task already in the queue. This example runs against an
// embedded Redis (miniredis) and needs no worker.
func ExampleClient_Enqueue() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c := airlock.NewClient(rdb, airlock.ClientOptions{})
	defer c.Close()

	const doc = `{
		"version": 1,
		"idempotency_key": "invoice-42",
		"queue": "billing",
		"steps": [{"run": ["sh", "-c", "echo render invoice 42"]}]
	}`
	var first airlock.Enqueued
	for i := 0; i < 2; i++ {
		spec, err := tasks.Decode([]byte(doc))
		if err != nil {
			log.Fatal(err)
		}
		enq, err := c.Enqueue(context.Background(), spec)
		if err != nil {
			log.Fatal(err)
		}
		if i == 0 {
			first = enq
		}
		fmt.Printf("duplicate=%v same task=%v same run=%v\n", enq.Duplicate, enq.TaskID == first.TaskID, enq.RunID == first.RunID)
	}
	// Output:
	// duplicate=false same task=true same run=true
	// duplicate=true same task=true same run=true
}
