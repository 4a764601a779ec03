package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	airlock "github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/policy"
)

// DefaultMaxWaiters is the default of Options.MaxWaiters.
const DefaultMaxWaiters = 256

// waiters counts the long polls, event streams and session calls an API
// server holds open: in all (a ceiling: Options.MaxWaiters), per token (a
// share of the ceiling: a quarter, at least 1, whatever the quotas say,
// so that no token holds them all) and per principal quota (its
// max_waiters, as the queue's workers published it).
type waiters struct {
	max, share int
	mu         sync.Mutex
	all        int
	by         map[string]int
}

func newWaiters(max int) *waiters {
	return &waiters{max: max, share: (max + 3) / 4, by: map[string]int{}}
}

// Why a waiter was refused.
const (
	waiterOK = iota
	waiterAll
	waiterShare
	waiterQuota
)

// take counts one more waiter of principal, or says which bound refused
// it: the server's ceiling, the token's share of it, or its quota (> 0).
func (ws *waiters) take(principal string, quota int64) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.all >= ws.max:
		return waiterAll
	case quota > 0 && int64(ws.by[principal]) >= quota:
		return waiterQuota
	case ws.by[principal] >= ws.share:
		return waiterShare
	}
	ws.all++
	ws.by[principal]++
	return waiterOK
}

func (ws *waiters) give(principal string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.all--
	if ws.by[principal]--; ws.by[principal] <= 0 {
		delete(ws.by, principal)
	}
}

// holdWaiter counts the request, a long poll, an event stream or a
// session's open or call, on queue, as one of its token's waiters, or
// answers it: 429 past the token's max_waiters (the quota the queue's
// workers published for the token's name), 503 past its share of the
// server's -max-waiters or past the whole. The caller defers the release
// it returns.
func (h *Handler) holdWaiter(w http.ResponseWriter, r *http.Request, queue string) (func(), bool) {
	tok := tokenOf(r)
	q, err := fairshare.LoadQuota(r.Context(), h.rdb, h.prefix, queue, tok.Name)
	if err != nil {
		h.internal(w, r, err)
		return nil, false
	}
	switch h.waiters.take(tok.Name, q.MaxWaiters) {
	case waiterAll:
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("this API server holds its -max-waiters %d long polls, event streams and session calls; try again shortly, or without wait", h.waiters.max)})
		return nil, false
	case waiterShare:
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("token %s holds %d long polls, event streams and session calls, its share of this API server's -max-waiters %d; try again shortly, or without wait", tok.Name, h.waiters.share, h.waiters.max)})
		return nil, false
	case waiterQuota:
		h.quotaRefused(w, r, &fairshare.QuotaError{Quota: policy.QuotaMaxWaiters, Principal: tok.Name, Queue: queue, Limit: q.MaxWaiters, RetryAfter: time.Second})
		return nil, false
	}
	return func() { h.waiters.give(tok.Name) }, true
}

// waitRequest holds a waiter (holdWaiter) until the request ends: net/http
// cancels a request's context once its handler returns.
func (h *Handler) waitRequest(w http.ResponseWriter, r *http.Request, queue string) bool {
	release, ok := h.holdWaiter(w, r, queue)
	if ok {
		context.AfterFunc(r.Context(), release)
	}
	return ok
}

// quotaRefused answers err when it is a quota's refusal (airlock.ErrQuota):
// 429 with Retry-After, the quota's name and value.
func (h *Handler) quotaRefused(w http.ResponseWriter, r *http.Request, err error) bool {
	var qe *airlock.QuotaError
	if !errors.As(err, &qe) {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(qe.RetryAfter.Seconds()))))
	h.fail(w, r, &Problem{Type: ProblemQuota, Status: http.StatusTooManyRequests, Detail: qe.Error(), Quota: qe.Quota, Limit: qe.Limit})
	return true
}
