package httpapi

import "sync"

// shares bounds what an API server holds at once for every token together
// (max) and for each token (share, so that one caller never holds it all),
// in units of its own: the bytes of request bodies in flight (body.go), the
// long polls, event streams and session calls open (waiters.go).
type shares struct {
	max, share int64
	mu         sync.Mutex
	used       int64
	by         map[string]int64
}

func newShares(bound, share int64) *shares {
	return &shares{max: bound, share: min(bound, share), by: map[string]int64{}}
}

// Why take refused.
const (
	shareOK    = iota
	shareAll   // every token together would pass max
	shareToken // the token would pass its share
	shareLimit // the token would pass the caller's limit (its quota)
)

// take reserves n units for token, or says which bound they would pass;
// limit > 0 bounds the token further (its quota).
func (s *shares) take(token string, n, limit int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.used+n > s.max:
		return shareAll
	case limit > 0 && s.by[token]+n > limit:
		return shareLimit
	case s.by[token]+n > s.share:
		return shareToken
	}
	s.used += n
	s.by[token] += n
	return shareOK
}

// give gives back n units token took.
func (s *shares) give(token string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used -= n
	if s.by[token] -= n; s.by[token] <= 0 {
		delete(s.by, token)
	}
}
