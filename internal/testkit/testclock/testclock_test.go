package testclock

import (
	"testing"
	"time"
)

func TestUnshift(t *testing.T) {
	set := func(d time.Duration) { shiftOnce.Do(func() {}); shift, shiftErr = d, nil }
	defer set(Shift())
	set(365 * 24 * time.Hour)
	for in, want := range map[string]string{
		"2027-12-02 15:00:00Z  ap-new":      "2026-12-02 15:00:00Z  ap-new",
		"expired at 2027-12-02T14:59:00Z":   "expired at 2026-12-02T14:59:00Z",
		"at 2027-12-02T14:59:00.250Z.":      "at 2026-12-02T14:59:00.250Z.",
		"report-2027-12-02 and 2027-12-02":  "report-2027-12-02 and 2027-12-02",
		"local 2027-12-02T14:59:00+01:00 x": "local 2027-12-02T14:59:00+01:00 x",
	} {
		if got := Unshift(in); got != want {
			t.Errorf("Unshift(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Epoch(); !got.Equal(base.Add(365 * 24 * time.Hour)) {
		t.Errorf("Epoch() = %s with a year's shift", got)
	}
	set(0)
	if got := Unshift("2027-12-02 15:00:00Z"); got != "2027-12-02 15:00:00Z" {
		t.Errorf("without a shift, Unshift changed %q", got)
	}
}
