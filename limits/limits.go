// Package limits holds the resource bounds of a step: the values a task spec
// may ask for, the operator's defaults and maximums (a Policy), and their
// parsing from flags and JSON. It is portable; what enforces each bound on
// Linux (cgroups, rlimits) is the sandbox's business.
//
// A spec can tighten the operator's limits, never loosen them: Policy.Resolve
// fills what a spec left out from the defaults and rejects anything above a
// maximum with a *FieldError that names the field.
package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is matched (errors.Is) by every *FieldError.
var ErrInvalid = errors.New("invalid limits")

// FieldError names the field of a spec or flag that is wrong, with a hint.
type FieldError struct {
	Field string // JSON path of the field, e.g. "limits.memory"
	Msg   string // what is wrong
	Hint  string // how to fix it; may be empty
}

func (e *FieldError) Error() string {
	if e.Hint == "" {
		return e.Field + ": " + e.Msg
	}
	return e.Field + ": " + e.Msg + " (" + e.Hint + ")"
}

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Bytes is a size in bytes. In JSON it is an integer or a string with a
// binary or decimal unit: 65536, "64KiB", "512MiB", "1GB".
type Bytes int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// ParseBytes parses "64MiB", "1GB", "4096" into a byte count.
func ParseBytes(s string) (Bytes, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			mult = u.mult
			s = strings.TrimSpace(strings.TrimSuffix(s, u.suffix))
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (use bytes or a unit such as 64MiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Bytes(n * mult), nil
}

// String formats b with the largest binary unit that divides it exactly.
func (b Bytes) String() string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.m == 0 {
			return strconv.FormatInt(int64(b)/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalJSON accepts an integer or a string with a unit.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil // like encoding/json: null leaves the value as is
	}
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		if n < 0 {
			return errors.New("must not be negative")
		}
		*b = Bytes(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("want an integer number of bytes or a string such as \"64MiB\"")
	}
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a time.Duration that reads and writes Go duration strings
// ("500ms", "1m30s") in JSON.
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string such as "30s".
func (d *Duration) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil // like encoding/json: null leaves the value as is
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("want a duration string such as \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (use Go syntax such as \"30s\")", s)
	}
	if v < 0 {
		return errors.New("must not be negative")
	}
	*d = Duration(v)
	return nil
}

// String returns the Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// Set is the bounds of a step. A zero field means "not given"; after
// Policy.Resolve every field is set.
type Set struct {
	CPUTime   Duration `json:"cpu_time,omitempty"`   // RLIMIT_CPU, per process
	Memory    Bytes    `json:"memory,omitempty"`     // the step's cgroup memory limit (RLIMIT_AS per process without one)
	Processes int      `json:"processes,omitempty"`  // the step's cgroup pids limit: processes and threads (RLIMIT_NPROC of its uid without one)
	FileSize  Bytes    `json:"file_size,omitempty"`  // RLIMIT_FSIZE: largest file a step may write
	OpenFiles int      `json:"open_files,omitempty"` // RLIMIT_NOFILE
	Output    Bytes    `json:"output,omitempty"`     // bytes of stdout and of stderr kept per step
	Workspace Bytes    `json:"workspace,omitempty"`  // bytes on disk for the whole workspace
	// OutputTotal is what a step may write to stdout and stderr
	// together; past it the worker kills the step's whole tree (verdict
	// output_limit). What is kept of each stream is still Output.
	OutputTotal Bytes `json:"output_total,omitempty"`
	// Profile names a set of values a kind of workload needs (Profiles:
	// "browser"); they fill what the spec did not give itself, and the
	// operator's maximums still bound them.
	Profile string `json:"profile,omitempty"`
}

// Profiles are named sets of limits for workloads whose needs are known,
// measured here (docs/spec.md#profiles). A spec asks for one with
// "limits": {"profile": "browser"}; an operator allows one with
// -max-limits profile=browser (the default maximums already do).
var Profiles = map[string]Set{
	// Headless Chromium, alone or driven by Playwright through a login
	// and an export (examples/browser-export), measured here: at most 140
	// processes and threads (it failed at 64 and 96, worked at 128), 207
	// descriptors in one process, 255 MB of memory (440–498 MB on a cold
	// page cache); about twice that.
	"browser": {
		CPUTime: Duration(2 * time.Minute), Memory: 1 << 30, Processes: 256,
		OpenFiles: 1024, Workspace: 256 << 20,
	},
}

// ProfileNames lists the profiles, for hints.
func ProfileNames() string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// withProfile returns s with what its profile gives filled in where s gives
// nothing; field names the profile's field in errors.
func (s Set) withProfile(field string) (Set, error) {
	if s.Profile == "" {
		return s, nil
	}
	p, ok := Profiles[s.Profile]
	if !ok {
		return s, &FieldError{Field: field, Msg: fmt.Sprintf("unknown profile %q", s.Profile), Hint: "known: " + ProfileNames()}
	}
	return s.Merge(p), nil
}

// field describes one member of Set for generic parsing, merging and checks.
type field struct {
	name string
	get  func(*Set) int64
	set  func(*Set, int64)
	kind byte // 'd' duration, 'b' bytes, 'n' count
}

var fields = []field{
	{"cpu_time", func(s *Set) int64 { return int64(s.CPUTime) }, func(s *Set, v int64) { s.CPUTime = Duration(v) }, 'd'},
	{"memory", func(s *Set) int64 { return int64(s.Memory) }, func(s *Set, v int64) { s.Memory = Bytes(v) }, 'b'},
	{"processes", func(s *Set) int64 { return int64(s.Processes) }, func(s *Set, v int64) { s.Processes = int(v) }, 'n'},
	{"file_size", func(s *Set) int64 { return int64(s.FileSize) }, func(s *Set, v int64) { s.FileSize = Bytes(v) }, 'b'},
	{"open_files", func(s *Set) int64 { return int64(s.OpenFiles) }, func(s *Set, v int64) { s.OpenFiles = int(v) }, 'n'},
	{"output", func(s *Set) int64 { return int64(s.Output) }, func(s *Set, v int64) { s.Output = Bytes(v) }, 'b'},
	{"workspace", func(s *Set) int64 { return int64(s.Workspace) }, func(s *Set, v int64) { s.Workspace = Bytes(v) }, 'b'},
	{"output_total", func(s *Set) int64 { return int64(s.OutputTotal) }, func(s *Set, v int64) { s.OutputTotal = Bytes(v) }, 'b'},
}

func formatValue(f field, v int64) string {
	switch f.kind {
	case 'd':
		return time.Duration(v).String()
	case 'b':
		return Bytes(v).String()
	}
	return strconv.FormatInt(v, 10)
}

// Parse reads a flag value such as "cpu_time=10s,memory=512MiB,processes=64"
// into a Set. field names the flag in errors.
func Parse(flagName, s string) (Set, error) {
	var out Set
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return out, &FieldError{Field: flagName, Msg: fmt.Sprintf("%q is not key=value", kv), Hint: "e.g. cpu_time=10s,memory=512MiB"}
		}
		if k == "profile" {
			if v == "" {
				return out, &FieldError{Field: flagName + ".profile", Msg: "empty", Hint: "known: " + ProfileNames()}
			}
			out.Profile = v
			continue
		}
		f, ok := lookup(k)
		if !ok {
			return out, &FieldError{Field: flagName + "." + k, Msg: "unknown limit", Hint: "known: " + Names() + "; or profile=" + ProfileNames()}
		}
		var n int64
		switch f.kind {
		case 'd':
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return out, &FieldError{Field: flagName + "." + k, Msg: fmt.Sprintf("%q is not a duration", v), Hint: "e.g. 30s"}
			}
			n = int64(d)
		case 'b':
			b, err := ParseBytes(v)
			if err != nil {
				return out, &FieldError{Field: flagName + "." + k, Msg: err.Error()}
			}
			n = int64(b)
		default:
			i, err := strconv.ParseInt(v, 10, 32)
			if err != nil || i < 0 {
				return out, &FieldError{Field: flagName + "." + k, Msg: fmt.Sprintf("%q is not a count", v)}
			}
			n = i
		}
		f.set(&out, n)
	}
	out, err := out.withProfile(flagName + ".profile")
	out.Profile = "" // its values are what an operator's flag means
	return out, err
}

// String formats s as Parse reads it, listing only the fields that are set.
func (s Set) String() string {
	var parts []string
	for _, f := range fields {
		if v := f.get(&s); v != 0 {
			parts = append(parts, f.name+"="+formatValue(f, v))
		}
	}
	return strings.Join(parts, ",")
}

// Names lists the limit names, for hints.
func Names() string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func lookup(name string) (field, bool) {
	for _, f := range fields {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

// Merge returns s with every zero field taken from def.
func (s Set) Merge(def Set) Set {
	for _, f := range fields {
		if f.get(&s) == 0 {
			f.set(&s, f.get(&def))
		}
	}
	return s
}

// Clamp returns s with every field above max lowered to it.
func (s Set) Clamp(max Set) Set {
	for _, f := range fields {
		if m := f.get(&max); m > 0 && f.get(&s) > m {
			f.set(&s, m)
		}
	}
	return s
}

// Policy is the operator's side of the limits: the defaults a spec gets when
// it says nothing, the maximums it may not exceed, and the task timeout and
// network permission. Workers publish their Policy so that enqueuers can
// reject a spec early; workers check again, since enqueuers are not trusted.
type Policy struct {
	Default        Set      `json:"default"`
	Max            Set      `json:"max"`
	DefaultTimeout Duration `json:"default_timeout"`
	MaxTimeout     Duration `json:"max_timeout"`
	// DefaultSessionTimeout is the timeout (the whole life) of a session
	// whose spec gives none; 0 means DefaultSessionTimeout. It is lowered
	// to MaxTimeout (SessionTimeout).
	DefaultSessionTimeout Duration `json:"default_session_timeout,omitempty"`
	AllowNetwork          bool     `json:"allow_network"`
	// MaxInputBytes is the default and the maximum size of a download of
	// a spec's inputs; 0 means DefaultMaxInputBytes.
	MaxInputBytes Bytes `json:"max_input_bytes,omitempty"`
	// MaxRecordBytes is the default and the maximum of what a run record
	// keeps of its steps' stdout and stderr, all steps together (a spec's
	// max_record_bytes may lower it); 0 means DefaultMaxRecordBytes.
	MaxRecordBytes Bytes `json:"max_record_bytes,omitempty"`
}

// UnmarshalJSON reads a Policy. One published by a worker that predates
// a limit has neither its default nor its maximum (output_total, whose
// absence made such a worker reject a spec that names it): they are taken
// from DefaultPolicy, so that the policy is coherent (Check) and an
// enqueuer checks a spec against the built-in bounds.
func (p *Policy) UnmarshalJSON(b []byte) error {
	type plain Policy // without this method
	var q plain
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	if q.Default.OutputTotal == 0 && q.Max.OutputTotal == 0 {
		d := DefaultPolicy()
		q.Default.OutputTotal, q.Max.OutputTotal = d.Default.OutputTotal, d.Max.OutputTotal
	}
	*p = Policy(q)
	return nil
}

// DefaultSessionTimeout is a session's life when neither its spec nor the
// operator (worker -session-timeout) says: long enough for an agent that
// thinks for minutes between its calls.
const DefaultSessionTimeout = Duration(30 * time.Minute)

// SessionTimeout is the timeout of a session whose spec gives none: the
// operator's default, or DefaultSessionTimeout, at most MaxTimeout.
func (p Policy) SessionTimeout() Duration {
	d := p.DefaultSessionTimeout
	if d <= 0 {
		d = DefaultSessionTimeout
	}
	return min(d, p.MaxTimeout)
}

// DefaultMaxRecordBytes is the bound of a run record's kept output when
// the operator sets none.
const DefaultMaxRecordBytes Bytes = 1 << 20

// RecordMax is the bound of a run record's kept output.
func (p Policy) RecordMax() Bytes {
	if p.MaxRecordBytes > 0 {
		return p.MaxRecordBytes
	}
	return DefaultMaxRecordBytes
}

// DefaultMaxInputBytes is the size cap of one input download when the
// operator sets none.
const DefaultMaxInputBytes Bytes = 256 << 20

// InputMax is the cap of one input download.
func (p Policy) InputMax() Bytes {
	if p.MaxInputBytes > 0 {
		return p.MaxInputBytes
	}
	return DefaultMaxInputBytes
}

// DefaultPolicy is the policy of a worker started without limit flags.
func DefaultPolicy() Policy {
	return Policy{
		Default: Set{
			CPUTime: Duration(30 * time.Second), Memory: 512 << 20, Processes: 64,
			FileSize: 64 << 20, OpenFiles: 256, Output: 64 << 10, Workspace: 64 << 20,
			OutputTotal: 16 << 20,
		},
		Max: Set{
			CPUTime: Duration(10 * time.Minute), Memory: 4 << 30, Processes: 1024,
			FileSize: 1 << 30, OpenFiles: 4096, Output: 4 << 20, Workspace: 1 << 30,
			OutputTotal: 1 << 30,
		},
		DefaultTimeout: Duration(60 * time.Second),
		MaxTimeout:     Duration(30 * time.Minute),
	}
}

// Check reports whether the policy is coherent: every maximum set and every
// default at or below its maximum.
func (p Policy) Check() error {
	for _, f := range fields {
		max, def := f.get(&p.Max), f.get(&p.Default)
		if max <= 0 {
			return &FieldError{Field: "max." + f.name, Msg: "must be set"}
		}
		if def <= 0 || def > max {
			return &FieldError{Field: "default." + f.name, Msg: fmt.Sprintf("%s must be between 1 and the maximum %s", formatValue(f, def), formatValue(f, max))}
		}
	}
	if p.MaxTimeout <= 0 || p.DefaultTimeout <= 0 || p.DefaultTimeout > p.MaxTimeout {
		return &FieldError{Field: "timeout", Msg: fmt.Sprintf("default %s must be positive and at most the maximum %s", p.DefaultTimeout, p.MaxTimeout)}
	}
	if p.DefaultSessionTimeout < 0 {
		return &FieldError{Field: "session_timeout", Msg: fmt.Sprintf("default %s must be positive (0: %s)", p.DefaultSessionTimeout, DefaultSessionTimeout)}
	}
	return nil
}

// Resolve checks asked against the maximums and fills what it left out from
// the defaults. prefix is the JSON path of asked in errors ("limits").
func (p Policy) Resolve(prefix string, asked Set) (Set, error) {
	given := asked
	asked, err := asked.withProfile(prefix + ".profile")
	if err != nil {
		return Set{}, err
	}
	for _, f := range fields {
		v, max := f.get(&asked), f.get(&p.Max)
		if v < 0 {
			return Set{}, &FieldError{Field: prefix + "." + f.name, Msg: "must not be negative"}
		}
		if v > max {
			e := &FieldError{
				Field: prefix + "." + f.name,
				Msg:   fmt.Sprintf("%s is above the worker's maximum %s", formatValue(f, v), formatValue(f, max)),
				Hint:  "a spec may lower a limit, never raise it past the operator's maximum",
			}
			if f.get(&given) == 0 {
				e.Msg = fmt.Sprintf("%s (profile %s) is above the worker's maximum %s", formatValue(f, v), asked.Profile, formatValue(f, max))
				e.Hint = fmt.Sprintf("the operator allows it with -max-limits %s=%s or more (-max-limits profile=%s sets every maximum to the profile's values, a value the flag gives itself winning)",
					f.name, formatValue(f, v), asked.Profile)
			}
			return Set{}, e
		}
	}
	return asked.Merge(p.Default), nil
}
