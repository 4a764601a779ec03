// Package testclock is the one fixed instant tests build their data at.
//
// A test whose data carries a date (an approval's creation, an event's
// time, a Retry-After) takes it from Epoch, never from a literal: the code
// under test gets the same instant as its clock. A fixture that meets the
// real clock instead (a binary run by the test, a Redis TTL) would pass
// until the real date reaches the fixture's expiry and fail on every
// machine after it. To find such a test today rather than on that day,
// `.ci/run` runs the packages that import testclock again with
// AIRLOCK_TEST_CLOCK_SHIFT set a year behind and a year ahead (a Go
// duration added to Epoch): a fixture compared with the real clock then
// expires, or is not due yet, at once. Golden outputs that print the epoch's
// dates go through Unshift, so they hold whatever the shift.
//
// The root package's TestFixedDates keeps literal dates out of tests.
package testclock

import (
	"fmt"
	"os"
	"regexp"
	"sync"
	"time"
)

// ShiftEnv is the environment variable that moves Epoch: a Go duration
// ("-8760h", "8760h"); empty or unset, no shift.
const ShiftEnv = "AIRLOCK_TEST_CLOCK_SHIFT"

// base is the epoch without a shift: what golden files print.
var base = time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)

var (
	shiftOnce sync.Once
	shift     time.Duration
	shiftErr  error
)

// Shift is the shift ShiftEnv asks for. It panics on a value that is not a
// duration: a guard that silently ran unshifted would prove nothing.
func Shift() time.Duration {
	shiftOnce.Do(func() {
		v := os.Getenv(ShiftEnv)
		if v == "" {
			return
		}
		shift, shiftErr = time.ParseDuration(v)
	})
	if shiftErr != nil {
		panic(fmt.Sprintf("testclock: %s=%q: %v", ShiftEnv, os.Getenv(ShiftEnv), shiftErr))
	}
	return shift
}

// Epoch is the fixed instant tests build their data at: 2026-12-02
// 15:00:00 UTC, moved by Shift.
func Epoch() time.Time { return base.Add(Shift()) }

// instantRe matches the instants outputs print: RFC 3339 in UTC, with a
// 'T' or a space, optional fractional seconds.
var instantRe = regexp.MustCompile(`\b(\d{4}-\d{2}-\d{2})([T ])(\d{2}:\d{2}:\d{2})(\.\d+)?Z`)

// Unshift moves every UTC instant printed in s back by Shift, keeping its
// layout: what a command printed at a shifted epoch becomes what it prints
// at the unshifted one, which golden files hold. Without a shift it
// returns s.
func Unshift(s string) string {
	d := Shift()
	if d == 0 {
		return s
	}
	return instantRe.ReplaceAllStringFunc(s, func(m string) string {
		p := instantRe.FindStringSubmatch(m)
		t, err := time.Parse(time.RFC3339Nano, p[1]+"T"+p[3]+p[4]+"Z")
		if err != nil {
			return m
		}
		layout := "2006-01-02" + p[2] + "15:04:05"
		if p[4] != "" {
			layout += "." + zeros(len(p[4])-1)
		}
		return t.Add(-d).Format(layout + "Z")
	})
}

// zeros is n zeros, a fractional-second layout of n digits.
func zeros(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}
