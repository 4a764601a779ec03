package httpapi

import (
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

// waiters counts the long polls and event streams an API server holds open:
// in all (a ceiling: Options.MaxWaiters) and per principal (its quota's
// max_waiters, as the queue's workers published it).
type waiters struct {
	max int
	mu  sync.Mutex
	all int
	by  map[string]int
}

func newWaiters(max int) *waiters { return &waiters{max: max, by: map[string]int{}} }

// take counts one more waiter of principal, unless the server holds its
// ceiling (overloaded) or the principal its quota (quota > 0).
func (ws *waiters) take(principal string, quota int64) (overloaded, refused bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.all >= ws.max:
		return true, false
	case quota > 0 && int64(ws.by[principal]) >= quota:
		return false, true
	}
	ws.all++
	ws.by[principal]++
	return false, false
}

func (ws *waiters) give(principal string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.all--
	if ws.by[principal]--; ws.by[principal] <= 0 {
		delete(ws.by, principal)
	}
}

// holdWaiter counts the request, a long poll or an event stream on a run
// of queue, as one of its token's waiters, or answers it: 429 past the
// token's max_waiters (the quota the queue's workers published for the
// token's name), 503 past the server's -max-waiters. The caller defers
// the release it returns.
func (h *Handler) holdWaiter(w http.ResponseWriter, r *http.Request, queue string) (func(), bool) {
	tok := tokenOf(r)
	q, err := fairshare.LoadQuota(r.Context(), h.rdb, h.prefix, queue, tok.Name)
	if err != nil {
		h.internal(w, r, err)
		return nil, false
	}
	overloaded, refused := h.waiters.take(tok.Name, q.MaxWaiters)
	switch {
	case overloaded:
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("this API server holds its -max-waiters %d long polls and event streams; try again shortly, or without wait", h.waiters.max)})
		return nil, false
	case refused:
		h.quotaRefused(w, r, &fairshare.QuotaError{Quota: policy.QuotaMaxWaiters, Principal: tok.Name, Queue: queue, Limit: q.MaxWaiters, RetryAfter: time.Second})
		return nil, false
	}
	return func() { h.waiters.give(tok.Name) }, true
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
