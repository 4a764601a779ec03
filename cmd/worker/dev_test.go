//go:build linux && !airlock_nodev

package main

import (
	"testing"

	"github.com/airlock-run/airlock/record"
)

// TestDemoNext: the dev demo's last line says to accept a parked output,
// and to read a promoted one back (never to accept what the policy
// promoted already).
func TestDemoNext(t *testing.T) {
	for _, c := range []struct {
		rec  record.Run
		want string
	}{
		{record.Run{State: record.StateParked, ApprovalID: "ap-1", TaskID: "t1"}, "approve accept ap-1, then enqueue -result t1"},
		{record.Run{State: record.StatePromoted, ApprovalID: "ap-2", TaskID: "t2"}, "enqueue -result t2 (promoted by the policy: nothing to approve)"},
		{record.Run{State: record.StateFailed, TaskID: "t3"}, ""},
	} {
		if got := demoNext(&c.rec); got != c.want {
			t.Errorf("%s: %q, want %q", c.rec.State, got, c.want)
		}
	}
}
