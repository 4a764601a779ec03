package egress

import (
	"fmt"
	"unicode/utf8"

	"github.com/airlock-run/airlock/record"
)

// The record of a run's egress is bounded whatever the steps do:
//
//   - a connection whose request named a destination (allowed, or refused
//     by the guard) is listed on its own, the first maxListed of them; the
//     rest are counted, bytes and all, in one last entry, host "(more)";
//   - a connection refused before it named one (past -egress-max-conns,
//     past the byte cap, a request head too large, too late, malformed or
//     not a proxy request) is counted in one entry per reason, host "",
//     with count and bytes: those reasons are a fixed set;
//   - a host is at most maxHost bytes (longer is refused before it is
//     listed), a reason at most maxReason.
//
// So the list holds at most maxListed + 1 + 8 entries of a few hundred
// bytes each: under 100 KiB of JSON.
const (
	maxListed = 128
	maxHost   = 253 // the longest DNS name
	maxReason = 256
)

// Reasons of connections refused before they named a destination; with
// those of the run's limits below (reasonConns, reasonCap,
// reasonCapReached, reasonHeadTimeout), the fixed set the record
// aggregates.
const (
	reasonHeadTooLarge = "refused: request head over 64 KiB"
	reasonHeadLines    = "refused: request head over 256 lines"
	reasonHeadBad      = "refused: malformed request head"
	reasonNoHead       = "closed by the step before a request head"
	reasonNotProxy     = "refused: not a proxy request (CONNECT host:port, or an absolute http:// URL with a valid port)"
	reasonHostTooLong  = "refused: host name over 253 bytes"
)

func (r *Run) reasonConns() string {
	return fmt.Sprintf("refused: %d connections of the run already open (-egress-max-conns)", r.Limits.MaxConns)
}

func (r *Run) reasonCap() string {
	return fmt.Sprintf("cut at the run's egress cap of %d bytes", r.Limits.MaxBytes)
}

func (r *Run) reasonCapReached() string {
	return fmt.Sprintf("refused: the run's egress cap of %d bytes is reached", r.Limits.MaxBytes)
}

func (r *Run) reasonHeadTimeout() string {
	return fmt.Sprintf("refused: no complete request head within %s", r.headTimeout())
}

func (r *Run) reasonIdle() string {
	return fmt.Sprintf("closed: nothing moved for %s (-egress-idle-timeout)", r.Limits.IdleTimeout)
}

// add lists a connection with a destination and returns its index, or -1
// when the list is full and the connection is counted in "(more)".
func (r *Run) add(e record.Egress) int {
	e.Host = clip(e.Host, maxHost)
	e.Reason = clip(e.Reason, maxReason)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) >= maxListed {
		r.more.Count++
		return -1
	}
	r.records = append(r.records, e)
	return len(r.records) - 1
}

// end records how the connection at i ended: its bytes, and why it ended
// early when it did.
func (r *Run) end(i int, up, down int64, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 {
		r.more.BytesUp += up
		r.more.BytesDown += down
		return
	}
	e := &r.records[i]
	e.BytesUp, e.BytesDown = up, down
	if why != "" {
		e.Reason = clip(why, maxReason)
	}
}

// refused counts a connection refused before it named a destination.
func (r *Run) refused(why string, up int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusedLocked(why, up)
}

func (r *Run) refusedLocked(why string, up int64) {
	for i := range r.refusals {
		if e := &r.refusals[i]; e.Reason == why {
			e.Count++
			e.BytesUp += up
			return
		}
	}
	r.refusals = append(r.refusals, record.Egress{Reason: clip(why, maxReason), Count: 1, BytesUp: up})
}

// list is the run's record: the connections listed, "(more)" when some
// were not, then the refusals by reason.
func (r *Run) list() []record.Egress {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.records
	if r.more.Count > 0 {
		m := r.more
		m.Host = "(more)"
		m.Reason = fmt.Sprintf("%d more connections not listed", m.Count)
		out = append(out, m)
	}
	return append(out, r.refusals...)
}

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
