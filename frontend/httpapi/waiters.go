package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	airlock "github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/policy"
)

// DefaultMaxWaiters is the default of Options.MaxWaiters.
const DefaultMaxWaiters = 256

// newWaiters bounds the long polls, event streams and session calls an API
// server holds open: max in all (Options.MaxWaiters), a quarter of it per
// token (at least 1) whatever the quotas say, and each principal's quota
// (its max_waiters, as the queue's workers published it) on top.
func newWaiters(max int) *shares { return newShares(int64(max), int64(max+3)/4) }

// holdWaiter counts the request, a long poll, an event stream or a
// session's open or call, on queue, as one of its token's waiters, or
// answers it: 429 past the token's max_waiters (the quota the queue's
// workers published for the token's name), 503 past its share of the
// server's -max-waiters or past the whole. The caller defers the release
// it returns.
func (h *Handler) holdWaiter(w http.ResponseWriter, r *http.Request, queue string) (func(), bool) {
	tok := tokenOf(r)
	q, err := h.quotas.load(r.Context(), h.rdb, h.prefix, queue, tok.Name)
	if err != nil {
		h.internal(w, r, err)
		return nil, false
	}
	switch h.waiters.take(tok.Name, 1, q.MaxWaiters) {
	case shareAll:
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("this API server holds its -max-waiters %d long polls, event streams and session calls; try again shortly, or without wait", h.waiters.max)})
		return nil, false
	case shareToken:
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("token %s holds %d long polls, event streams and session calls, its share of this API server's -max-waiters %d; try again shortly, or without wait", tok.Name, h.waiters.share, h.waiters.max)})
		return nil, false
	case shareLimit:
		h.quotaRefused(w, r, &fairshare.QuotaError{Quota: policy.QuotaMaxWaiters, Principal: tok.Name, Queue: queue, Limit: q.MaxWaiters, RetryAfter: time.Second})
		return nil, false
	}
	return func() { h.waiters.give(tok.Name, 1) }, true
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

// quotaCache holds the quotas holdWaiter read, for quotaFresh: a long
// poll then costs Redis no read of its quota. A quota the workers publish
// anew applies within quotaFresh.
type quotaCache struct {
	mu sync.Mutex
	m  map[string]cachedQuota // by queue, NUL, principal
}

type cachedQuota struct {
	q  policy.Quota
	at time.Time
}

// quotaFresh is how long a quota read is used; quotaCacheMax bounds the
// entries kept (past it, the cache starts over).
const (
	quotaFresh    = time.Second
	quotaCacheMax = 4096
)

// load returns principal's quota in queue (fairshare.LoadQuota), as read
// within quotaFresh.
func (c *quotaCache) load(ctx context.Context, rdb redis.UniversalClient, prefix, queue, principal string) (policy.Quota, error) {
	key := queue + "\x00" + principal
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && time.Since(e.at) < quotaFresh {
		return e.q, nil
	}
	q, err := fairshare.LoadQuota(ctx, rdb, prefix, queue, principal)
	if err != nil {
		return policy.Quota{}, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= quotaCacheMax {
		c.m = map[string]cachedQuota{}
	}
	c.m[key] = cachedQuota{q: q, at: time.Now()}
	c.mu.Unlock()
	return q, nil
}
