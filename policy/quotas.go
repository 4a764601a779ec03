package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/airlock-run/airlock/limits"
)

// AnyPrincipal is the quotas: key of every principal without its own
// entry, and of runs that name no principal.
const AnyPrincipal = "*"

// Quota is what the policy's quotas: section lets one principal hold in a
// queue its workers serve. A zero field sets no bound: the fleet's own
// bounds (a worker's -max-sessions, -max-pending-bytes, its slots) still
// hold for everyone.
type Quota struct {
	// MaxQueued bounds the principal's runs waiting in the queue (held
	// behind its earlier runs, or waiting for a worker).
	MaxQueued int64 `json:"max_queued,omitempty"`
	// MaxActive bounds its runs running at once in the queue (an open
	// session is a running run).
	MaxActive int64 `json:"max_active,omitempty"`
	// MaxSessions bounds its open sessions in the queue.
	MaxSessions int64 `json:"max_sessions,omitempty"`
	// MaxPendingBytes bounds the bytes (results and artifacts) its
	// parked outputs hold in Redis until decided.
	MaxPendingBytes limits.Bytes `json:"max_pending_bytes,omitempty"`
	// MaxWaiters bounds its open long polls and event streams, per API
	// server.
	MaxWaiters int64 `json:"max_waiters,omitempty"`
	// RunsPerMinute bounds the runs it may enqueue in the queue in any
	// minute (a sliding window).
	RunsPerMinute int64 `json:"runs_per_minute,omitempty"`
}

// IsZero reports whether q bounds nothing.
func (q Quota) IsZero() bool { return q == Quota{} }

// Quota names, as refusals name them (the quotas: keys).
const (
	QuotaMaxQueued       = "max_queued"
	QuotaMaxActive       = "max_active"
	QuotaMaxSessions     = "max_sessions"
	QuotaMaxPendingBytes = "max_pending_bytes"
	QuotaMaxWaiters      = "max_waiters"
	QuotaRunsPerMinute   = "runs_per_minute"
)

// maxQuotas bounds the quotas: section's entries (its principals): what a
// worker publishes, and the cardinality of the metrics per principal.
const maxQuotas = 1000

// Quotas returns the quotas: section, by principal ("*" for the rest);
// nil when the policy has none.
func (p *Policy) Quotas() map[string]Quota {
	if p == nil || p.quotas == nil {
		return nil
	}
	return maps.Clone(p.quotas)
}

// QuotaOf returns the quota of principal: its own entry, else "*"'s, else
// none. A run that names no principal ("") has "*"'s.
func (p *Policy) QuotaOf(principal string) Quota {
	if p == nil {
		return Quota{}
	}
	if q, ok := p.quotas[principal]; ok && principal != "" {
		return q
	}
	return p.quotas[AnyPrincipal]
}

// parseQuotas reads the quotas: section: a mapping of principals (or "*")
// to quotas.
func parseQuotas(n *node) (map[string]Quota, error) {
	if n.kind == scalarNode && n.value == nil {
		return nil, nil
	}
	if n.kind != mapNode {
		return nil, fieldErr(n, "quotas", "must be a mapping of principals (or \"*\") to quotas, not %s", n.what())
	}
	if len(n.keys) > maxQuotas {
		return nil, fieldErr(n, "quotas", "%d entries, at most %d", len(n.keys), maxQuotas)
	}
	out := make(map[string]Quota, len(n.keys))
	for i, who := range n.keys {
		field := "quotas." + who
		if who != AnyPrincipal && !principalRE.MatchString(who) {
			return nil, fieldErr(n.vals[i], field, "%q is not a principal: an API token's name or an MCP -principal (1-64 letters, digits, '.', '_', '@', '+' or '-'), or \"*\" for every other", who)
		}
		q, err := parseQuota(n.vals[i], field)
		if err != nil {
			return nil, err
		}
		out[who] = q
	}
	return out, nil
}

// quotaCounts are the quota fields that hold a count, by key.
var quotaCounts = map[string]func(*Quota) *int64{
	QuotaMaxQueued:     func(q *Quota) *int64 { return &q.MaxQueued },
	QuotaMaxActive:     func(q *Quota) *int64 { return &q.MaxActive },
	QuotaMaxSessions:   func(q *Quota) *int64 { return &q.MaxSessions },
	QuotaMaxWaiters:    func(q *Quota) *int64 { return &q.MaxWaiters },
	QuotaRunsPerMinute: func(q *Quota) *int64 { return &q.RunsPerMinute },
}

func parseQuota(n *node, field string) (Quota, error) {
	var q Quota
	known := append(slices.Sorted(maps.Keys(quotaCounts)), QuotaMaxPendingBytes)
	m, err := fields(n, field, known...)
	if err != nil {
		return q, err
	}
	for k, c := range m {
		f := field + "." + k
		if k == QuotaMaxPendingBytes {
			b, err := sizeOf(c, f)
			if err != nil {
				return q, err
			}
			q.MaxPendingBytes = b
			continue
		}
		num, isNum := c.value.(number)
		if c.kind != scalarNode || !isNum || !num.isInt || num.i < 1 {
			return q, fieldErr(c, f, "must be a whole number, at least 1, not %s (leave it out for no bound)", c.what())
		}
		*quotaCounts[k](&q) = num.i
	}
	return q, nil
}

// sizeOf reads a size as limits does: a number of bytes, or a string with
// a unit ("1MiB").
func sizeOf(c *node, field string) (limits.Bytes, error) {
	if c.kind == scalarNode {
		switch v := c.value.(type) {
		case number:
			if v.isInt && v.i >= 1 {
				return limits.Bytes(v.i), nil
			}
		case string:
			if b, err := limits.ParseBytes(v); err == nil && b >= 1 {
				return b, nil
			} else if err != nil {
				return 0, fieldErr(c, field, "%v", err)
			}
		}
	}
	return 0, fieldErr(c, field, "must be a size of at least 1 byte (a number of bytes, or a string such as \"1MiB\"), not %s", c.what())
}

// String describes q in a line, for a worker's log.
func (q Quota) String() string {
	var s []string
	add := func(k string, v int64) {
		if v > 0 {
			s = append(s, fmt.Sprintf("%s %d", k, v))
		}
	}
	add(QuotaMaxQueued, q.MaxQueued)
	add(QuotaMaxActive, q.MaxActive)
	add(QuotaMaxSessions, q.MaxSessions)
	if q.MaxPendingBytes > 0 {
		s = append(s, QuotaMaxPendingBytes+" "+q.MaxPendingBytes.String())
	}
	add(QuotaMaxWaiters, q.MaxWaiters)
	add(QuotaRunsPerMinute, q.RunsPerMinute)
	if len(s) == 0 {
		return "no bound"
	}
	return fmt.Sprint(s)
}
