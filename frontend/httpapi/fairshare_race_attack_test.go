package httpapi_test

// ATTACK TEST (temporary): a quota refusal at admission deletes a task a
// concurrent release already let into the queue.

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/hibiken/asynq"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/policy"
)

func TestAttackAdmitRace(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	rdb := redistest.Client(t)
	ctx := context.Background()
	if err := fairshare.PublishQuotas(ctx, rdb, e.prefix, []string{e.queue}, map[string]policy.Quota{"*": {MaxQueued: 2}}); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(e.spec(false, ""))
	codes := map[int]int{}
	totalOrphans, rounds := 0, 150
	var mu sync.Mutex
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", e.srv.URL+"/v1/runs", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokWriter)
				<-start
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				mu.Lock()
				codes[res.StatusCode]++
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		pending, _ := rdb.LRange(ctx, asynqkey.Pending(e.queue), 0, -1).Result()
		for _, id := range pending {
			if n, _ := rdb.Exists(ctx, asynqkey.Task(e.queue, id)).Result(); n == 0 {
				totalOrphans++
				if totalOrphans == 1 {
					claim, _ := rdb.ZRange(ctx, e.prefix+"fair:{"+e.queue+"}:claim:writer", 0, -1).Result()
					t.Logf("round %d: pending %v, orphan %s (no task hash), claim %v", round, pending, id, claim)
				}
			} else {
				rdb.Del(ctx, asynqkey.Task(e.queue, id))
			}
		}
		rdb.Del(ctx, asynqkey.Pending(e.queue), e.prefix+"fair:{"+e.queue+"}:claim:writer", asynqkey.Prefix(e.queue)+"g:p:writer")
	}
	t.Logf("answers %v over %d rounds of 4; orphaned ids in pending (a 429'd task deleted after its release): %d", codes, rounds, totalOrphans)
}

func TestAttackAdmitRaceRuns(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	rdb := redistest.Client(t)
	ctx := context.Background()
	if err := fairshare.PublishQuotas(ctx, rdb, e.prefix, []string{e.queue}, map[string]policy.Quota{"*": {MaxQueued: 2}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := 0
	redistest.Serve(t, e.queue, func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		ran++
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	body, _ := json.Marshal(e.spec(false, ""))
	codes := map[int]int{}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				req, _ := http.NewRequest("POST", e.srv.URL+"/v1/runs", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokWriter)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				mu.Lock()
				codes[res.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	active, _ := rdb.LRange(ctx, asynqkey.Active(e.queue), 0, -1).Result()
	stubs := 0
	for _, id := range active {
		st, _ := rdb.HGetAll(ctx, asynqkey.Task(e.queue, id)).Result()
		if st["msg"] == "" {
			stubs++
			if stubs == 1 {
				t.Logf("phantom active task %s: hash %v", id, st)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("answers %v; handler ran %d runs; active list %d ids, %d of them stubs with no msg", codes, ran, len(active), stubs)
	// clean the stubs so the queue cleanup does not complain
	for _, id := range active {
		rdb.LRem(ctx, asynqkey.Active(e.queue), 0, id)
		rdb.ZRem(ctx, asynqkey.Lease(e.queue), id)
		rdb.Del(ctx, asynqkey.Task(e.queue, id))
	}
}

func TestAttackAdmitRaceMaxActive(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	rdb := redistest.Client(t)
	ctx := context.Background()
	if err := fairshare.PublishQuotas(ctx, rdb, e.prefix, []string{e.queue}, map[string]policy.Quota{"*": {MaxQueued: 3, MaxActive: 2}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := 0
	redistest.Serve(t, e.queue, func(ctx context.Context, task *asynq.Task) error {
		mu.Lock()
		ran++
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go func() { // the worker's sweep, often
		for sweepCtx.Err() == nil {
			_ = fairshare.Sweep(sweepCtx, rdb, e.prefix, e.queue)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	body, _ := json.Marshal(e.spec(false, ""))
	codes := map[int]int{}
	var wg sync.WaitGroup
	post := func() int {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/runs", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokWriter)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	phantoms := func() int {
		n := 0
		claim, _ := rdb.ZRange(ctx, e.prefix+"fair:{"+e.queue+"}:claim:writer", 0, -1).Result()
		for _, id := range claim {
			if st, _ := rdb.HGetAll(ctx, asynqkey.Task(e.queue, id)).Result(); st["state"] == "active" && st["msg"] == "" {
				n++
			}
		}
		return n
	}
	var stop sync.Once
	done := make(chan struct{})
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				select {
				case <-done:
					return
				default:
				}
				if phantoms() >= 2 {
					stop.Do(func() { close(done) })
					return
				}
				c := post()
				mu.Lock()
				codes[c]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second)
	for i := 0; i < 3; i++ {
		if err := fairshare.Sweep(ctx, rdb, e.prefix, e.queue); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	claim, _ := rdb.ZRange(ctx, e.prefix+"fair:{"+e.queue+"}:claim:writer", 0, -1).Result()
	for _, id := range claim {
		st, _ := rdb.HGetAll(ctx, asynqkey.Task(e.queue, id)).Result()
		t.Logf("claimed %s: state %q, has msg %v", id, st["state"], st["msg"] != "")
	}
	mu.Lock()
	before := ran
	mu.Unlock()
	// a fresh run of the principal now
	c := post()
	time.Sleep(5 * time.Second)
	mu.Lock()
	t.Logf("answers %v; ran %d; fresh POST %d, runs started after it: %d", codes, before, c, ran-before)
	mu.Unlock()
	group, _ := rdb.ZCard(ctx, asynqkey.Prefix(e.queue)+"g:p:writer").Result()
	t.Logf("held in writer's line: %d", group)
	active, _ := rdb.LRange(ctx, asynqkey.Active(e.queue), 0, -1).Result()
	for _, id := range active {
		rdb.LRem(ctx, asynqkey.Active(e.queue), 0, id)
		rdb.ZRem(ctx, asynqkey.Lease(e.queue), id)
		rdb.Del(ctx, asynqkey.Task(e.queue, id))
	}
}
