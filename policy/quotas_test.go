package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/policy"
)

// TestQuotas: the quotas: section read from YAML and JSON, sizes as limits
// writes them, "*" for the rest; QuotaOf picks a principal's own entry,
// else "*"'s (a run naming no principal gets "*"'s).
func TestQuotas(t *testing.T) {
	yaml := `
quotas:
  agent:
    max_queued: 10
    max_active: 2
    max_sessions: 1
    max_pending_bytes: 1MiB
    max_waiters: 20
    runs_per_minute: 600
  "*": {max_pending_bytes: 4096}
`
	json := `{"quotas": {"agent": {"max_queued": 10, "max_active": 2, "max_sessions": 1, "max_pending_bytes": "1MiB", "max_waiters": 20, "runs_per_minute": 600}, "*": {"max_pending_bytes": 4096}}}`
	want := map[string]policy.Quota{
		"agent": {MaxQueued: 10, MaxActive: 2, MaxSessions: 1, MaxPendingBytes: 1 << 20, MaxWaiters: 20, RunsPerMinute: 600},
		"*":     {MaxPendingBytes: 4096},
	}
	for format, text := range map[string]string{"yaml": yaml, "json": json} {
		p, err := policy.Parse([]byte(text), format)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if diff := cmp.Diff(want, p.Quotas()); diff != "" {
			t.Errorf("%s quotas (-want +got):\n%s", format, diff)
		}
		for who, q := range map[string]policy.Quota{"agent": want["agent"], "other": want["*"], "": want["*"]} {
			if got := p.QuotaOf(who); got != q {
				t.Errorf("%s: QuotaOf(%q) = %+v, want %+v", format, who, got, q)
			}
		}
	}
	p, err := policy.Parse([]byte("default: park\n"), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Quotas() != nil || !p.QuotaOf("agent").IsZero() || !policy.NoPolicy().QuotaOf("x").IsZero() {
		t.Error("a policy without quotas: bounds something")
	}
}

// TestQuotaErrors: a bad quota names its field.
func TestQuotaErrors(t *testing.T) {
	for _, tt := range []struct{ text, field, msg string }{
		{`{"quotas": []}`, "quotas", "must be a mapping"},
		{`{"quotas": {"bad name!": {"max_queued": 1}}}`, `quotas.bad name!`, "is not a principal"},
		{`{"quotas": {"a": {"max_qeued": 1}}}`, "quotas.a.max_qeued", "unknown key"},
		{`{"quotas": {"a": {"max_queued": 0}}}`, "quotas.a.max_queued", "at least 1"},
		{`{"quotas": {"a": {"max_active": 1.5}}}`, "quotas.a.max_active", "whole number"},
		{`{"quotas": {"a": {"max_active": "2"}}}`, "quotas.a.max_active", "whole number"},
		{`{"quotas": {"a": {"max_pending_bytes": "lots"}}}`, "quotas.a.max_pending_bytes", "not a size"},
		{`{"quotas": {"a": {"max_pending_bytes": 0}}}`, "quotas.a.max_pending_bytes", "at least 1 byte"},
		{`{"quotas": {"a": 3}}`, "quotas.a", "must be a mapping"},
	} {
		_, err := policy.Parse([]byte(tt.text), "json")
		var pe *policy.ParseError
		if !errors.As(err, &pe) || pe.Field != tt.field || !strings.Contains(pe.Msg, tt.msg) {
			t.Errorf("%s: %v; want field %s, %q", tt.text, err, tt.field, tt.msg)
		}
	}
}
