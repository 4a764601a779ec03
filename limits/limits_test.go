package limits_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/limits"
	"github.com/google/go-cmp/cmp"
)

// fieldErr asserts that err is a *limits.FieldError matching ErrInvalid.
func fieldErr(t *testing.T, err error) *limits.FieldError {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want a *limits.FieldError")
	}
	if !errors.Is(err, limits.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false, want true", err)
	}
	var fe *limits.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *limits.FieldError", err, err)
	}
	if fe.Msg == "" {
		t.Errorf("error for %q has an empty Msg", fe.Field)
	}
	return fe
}

// setNames are the JSON names of the members of Set, in order.
func setNames() []string {
	rt := reflect.TypeOf(limits.Set{})
	var out []string
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name == "profile" {
			continue // a name of values, not a limit (TestProfiles)
		}
		out = append(out, name)
	}
	return out
}

// member reaches one member of Set by its JSON name.
type member struct {
	name string
	get  func(limits.Set) int64
	set  func(*limits.Set, int64)
}

var members = []member{
	{"cpu_time", func(s limits.Set) int64 { return int64(s.CPUTime) }, func(s *limits.Set, v int64) { s.CPUTime = limits.Duration(v) }},
	{"memory", func(s limits.Set) int64 { return int64(s.Memory) }, func(s *limits.Set, v int64) { s.Memory = limits.Bytes(v) }},
	{"processes", func(s limits.Set) int64 { return int64(s.Processes) }, func(s *limits.Set, v int64) { s.Processes = int(v) }},
	{"file_size", func(s limits.Set) int64 { return int64(s.FileSize) }, func(s *limits.Set, v int64) { s.FileSize = limits.Bytes(v) }},
	{"open_files", func(s limits.Set) int64 { return int64(s.OpenFiles) }, func(s *limits.Set, v int64) { s.OpenFiles = int(v) }},
	{"output", func(s limits.Set) int64 { return int64(s.Output) }, func(s *limits.Set, v int64) { s.Output = limits.Bytes(v) }},
	{"workspace", func(s limits.Set) int64 { return int64(s.Workspace) }, func(s *limits.Set, v int64) { s.Workspace = limits.Bytes(v) }},
	{"output_total", func(s limits.Set) int64 { return int64(s.OutputTotal) }, func(s *limits.Set, v int64) { s.OutputTotal = limits.Bytes(v) }},
}

func TestMembersCoverSet(t *testing.T) {
	var got []string
	for _, m := range members {
		got = append(got, m.name)
	}
	if diff := cmp.Diff(setNames(), got); diff != "" {
		t.Errorf("members does not cover Set (-want +got):\n%s", diff)
	}
}

func TestFieldError(t *testing.T) {
	tests := []struct {
		err  *limits.FieldError
		want string
	}{
		{&limits.FieldError{Field: "limits.memory", Msg: "too big"}, "limits.memory: too big"},
		{&limits.FieldError{Field: "limits.memory", Msg: "too big", Hint: "lower it"}, "limits.memory: too big (lower it)"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.err.Error()); diff != "" {
			t.Errorf("Error() mismatch (-want +got):\n%s", diff)
		}
		if !errors.Is(tt.err, limits.ErrInvalid) {
			t.Errorf("errors.Is(%v, ErrInvalid) = false", tt.err)
		}
		if errors.Is(tt.err, errors.New("invalid limits")) {
			t.Errorf("errors.Is matches an unrelated error with the same text")
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    limits.Bytes
		wantErr string // substring of the error; empty: no error
	}{
		{in: "64MiB", want: 64 << 20},
		{in: "1GB", want: 1_000_000_000},
		{in: "4096", want: 4096},
		{in: "0", want: 0},
		{in: "1K", want: 1 << 10},
		{in: "1M", want: 1 << 20},
		{in: "1G", want: 1 << 30},
		{in: "1B", want: 1},
		{in: "1KB", want: 1000},
		{in: "1MB", want: 1_000_000},
		{in: "2TB", want: 2_000_000_000_000},
		{in: "1KiB", want: 1 << 10},
		{in: "3GiB", want: 3 << 30},
		{in: "1TiB", want: 1 << 40},
		{in: " 2 MiB ", want: 2 << 20}, // spaces around the number and the unit are trimmed
		{in: "\t512\n", want: 512},
		{in: "+5", want: 5},                                       // strconv.ParseInt accepts a sign
		{in: "8388607TiB", want: 8388607 << 40},                   // largest whole TiB count
		{in: "9223372036854775807", want: math.MaxInt64},          // largest byte count
		{in: "9223372036854775807B", want: math.MaxInt64},         // with a unit of 1
		{in: "8388608TiB", wantErr: "too large"},                  // 2^63
		{in: "9999999999TiB", wantErr: "too large"},               // overflow
		{in: "9223372036854775808", wantErr: "is not a size"},     // above int64
		{in: "99999999999999999999GiB", wantErr: "is not a size"}, // above int64 before the unit
		{in: "-1", wantErr: "is not a size"},
		{in: "-1KiB", wantErr: "is not a size"},
		{in: "abc", wantErr: "is not a size"},
		{in: "", wantErr: "is not a size"},
		{in: "MiB", wantErr: "is not a size"},
		{in: "1.5GiB", wantErr: "is not a size"},
		{in: "2 mib", wantErr: "is not a size"}, // units are case-sensitive
		{in: "1KiBKiB", wantErr: "is not a size"},
		{in: "1 000", wantErr: "is not a size"},
		{in: "0x10", wantErr: "is not a size"},
	}
	for _, tt := range tests {
		got, err := limits.ParseBytes(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseBytes(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBytes(%q) = %v, want nil error", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseBytes(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestBytesString(t *testing.T) {
	tests := []struct {
		in   limits.Bytes
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1023, "1023"},
		{1024, "1KiB"},
		{1536, "1536"},
		{3 << 10, "3KiB"},
		{1 << 20, "1MiB"},
		{1025 << 10, "1025KiB"},
		{512 << 20, "512MiB"},
		{1 << 30, "1GiB"},
		{1 << 40, "1TiB"},
		{1 << 50, "1024TiB"},
		{1_000_000_000, "1000000000"}, // decimal units are not divisible by 1024
		{1_000_000, "1000000"},        // 10^6 = 2^6 × 15625
		{64_000, "64000"},             // 64000 = 62.5KiB: no exact binary unit
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.in.String()); diff != "" {
			t.Errorf("Bytes(%d).String() mismatch (-want +got):\n%s", int64(tt.in), diff)
		}
	}
}

// byteValues is a spread of non-negative sizes: units, their neighbours,
// decimal sizes, extremes and random values (fixed seed).
func byteValues() []limits.Bytes {
	var out []limits.Bytes
	for _, base := range []int64{1, 1 << 10, 1 << 20, 1 << 30, 1 << 40, 1e3, 1e6, 1e9, 1e12} {
		for _, k := range []int64{1, 2, 3, 7, 512, 1000, 1023, 1024, 1025} {
			if base > math.MaxInt64/k {
				continue
			}
			v := base * k
			out = append(out, limits.Bytes(v), limits.Bytes(v+1))
			if v > 0 {
				out = append(out, limits.Bytes(v-1))
			}
		}
	}
	out = append(out, 0, math.MaxInt64, math.MaxInt64-1, 1<<62, 8388607<<40)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		out = append(out, limits.Bytes(r.Int64()), limits.Bytes(r.Int64N(1<<20)<<(r.IntN(4)*10)))
	}
	return out
}

func TestBytesStringRoundTrip(t *testing.T) {
	for _, b := range byteValues() {
		s := b.String()
		got, err := limits.ParseBytes(s)
		if err != nil {
			t.Errorf("ParseBytes(Bytes(%d).String() = %q) = %v", int64(b), s, err)
			continue
		}
		if got != b {
			t.Errorf("ParseBytes(%q) = %d, want %d", s, int64(got), int64(b))
		}
	}
}

func TestBytesJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    limits.Bytes
		wantErr string
	}{
		{in: `65536`, want: 65536},
		{in: `0`, want: 0},
		{in: `"64KiB"`, want: 64 << 10},
		{in: `"512MiB"`, want: 512 << 20},
		{in: `"1GB"`, want: 1e9},
		{in: `"4096"`, want: 4096},
		{in: `9223372036854775807`, want: math.MaxInt64},
		{in: `-1`, wantErr: "negative"},
		{in: `"-1"`, wantErr: "is not a size"},
		{in: `"abc"`, wantErr: "is not a size"},
		{in: `"9999999999TiB"`, wantErr: "too large"},
		{in: `""`, wantErr: "is not a size"},
		{in: `true`, wantErr: "want an integer"},
		{in: `1.5`, wantErr: "want an integer"},
		{in: `1e3`, wantErr: "want an integer"},
		{in: `9223372036854775808`, wantErr: "want an integer"},
		{in: `{}`, wantErr: "want an integer"},
		{in: `[1]`, wantErr: "want an integer"},
	}
	for _, tt := range tests {
		var got limits.Bytes
		err := json.Unmarshal([]byte(tt.in), &got)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Unmarshal(%s) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Unmarshal(%s) = %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Unmarshal(%s) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}

	// Bytes marshal as an integer and read back, in both forms.
	for _, b := range byteValues() {
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := json.Unmarshal(data, &n); err != nil || n != int64(b) {
			t.Errorf("Marshal(Bytes(%d)) = %s, want the integer", int64(b), data)
		}
		for _, in := range [][]byte{data, []byte(`"` + b.String() + `"`)} {
			var got limits.Bytes
			if err := json.Unmarshal(in, &got); err != nil || got != b {
				t.Errorf("Unmarshal(%s) = %d, %v; want %d", in, int64(got), err, int64(b))
			}
		}
	}

	// null leaves the value as it is, as encoding/json does.
	got := limits.Bytes(7)
	if err := json.Unmarshal([]byte(`null`), &got); err != nil || got != 7 {
		t.Errorf("Unmarshal(null) into 7 = %d, %v; want 7, nil", int64(got), err)
	}
}

func TestDurationJSON(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, 1500 * time.Millisecond, 30 * time.Second, 90 * time.Second, 2 * time.Hour, math.MaxInt64} {
		data, err := json.Marshal(limits.Duration(d))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(`"`+d.String()+`"`, string(data)); diff != "" {
			t.Errorf("Marshal(%v) mismatch (-want +got):\n%s", d, diff)
		}
		var got limits.Duration
		if err := json.Unmarshal(data, &got); err != nil {
			t.Errorf("Unmarshal(%s) = %v", data, err)
		} else if time.Duration(got) != d {
			t.Errorf("Unmarshal(%s) = %v, want %v", data, time.Duration(got), d)
		}
		if got := limits.Duration(d).String(); got != d.String() {
			t.Errorf("Duration(%v).String() = %q, want %q", d, got, d.String())
		}
	}

	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: `"30s"`, want: 30 * time.Second},
		{in: `"1m30s"`, want: 90 * time.Second},
		{in: `"500ms"`, want: 500 * time.Millisecond},
		{in: `"0"`, want: 0},
		{in: `30`, wantErr: "want a duration string"},
		{in: `true`, wantErr: "want a duration string"},
		{in: `"30"`, wantErr: "is not a duration"},
		{in: `"abc"`, wantErr: "is not a duration"},
		{in: `""`, wantErr: "is not a duration"},
		{in: `"-1s"`, wantErr: "negative"},
	}
	for _, tt := range tests {
		var got limits.Duration
		err := json.Unmarshal([]byte(tt.in), &got)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Unmarshal(%s) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Unmarshal(%s) = %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, time.Duration(got)); diff != "" {
			t.Errorf("Unmarshal(%s) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}

	// null leaves the value as it is, as encoding/json does.
	got := limits.Duration(time.Second)
	if err := json.Unmarshal([]byte(`null`), &got); err != nil || got != limits.Duration(time.Second) {
		t.Errorf("Unmarshal(null) into 1s = %v, %v; want 1s, nil", got, err)
	}
}

func TestSetJSON(t *testing.T) {
	in := `{"cpu_time":"10s","memory":"512MiB","processes":64,"file_size":1048576,"open_files":256,"output":"64KiB","workspace":"1GB"}`
	var got limits.Set
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	want := limits.Set{
		CPUTime: limits.Duration(10 * time.Second), Memory: 512 << 20, Processes: 64,
		FileSize: 1 << 20, OpenFiles: 256, Output: 64 << 10, Workspace: 1e9,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unmarshal mismatch (-want +got):\n%s", diff)
	}
	data, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var again limits.Set
	if err := json.Unmarshal(data, &again); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
	// Unset members are omitted.
	data, err = json.Marshal(limits.Set{Memory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"memory":1048576}`, string(data)); diff != "" {
		t.Errorf("Marshal of a partial set mismatch (-want +got):\n%s", diff)
	}

	// A policy reads back what it writes.
	p := limits.DefaultPolicy()
	data, err = json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var p2 limits.Policy
	if err := json.Unmarshal(data, &p2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, p2); diff != "" {
		t.Errorf("Policy round trip mismatch (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	want := setNames()
	sort.Strings(want)
	if diff := cmp.Diff(strings.Join(want, ", "), limits.Names()); diff != "" {
		t.Errorf("Names mismatch (-want +got):\n%s", diff)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want limits.Set
	}{
		{"", limits.Set{}},
		{"   ", limits.Set{}},
		{"cpu_time=10s,memory=512MiB,processes=64", limits.Set{CPUTime: limits.Duration(10 * time.Second), Memory: 512 << 20, Processes: 64}},
		{
			"cpu_time=1m30s,memory=4GiB,processes=1024,file_size=1GB,open_files=4096,output=64KiB,workspace=1073741824",
			limits.Set{CPUTime: limits.Duration(90 * time.Second), Memory: 4 << 30, Processes: 1024, FileSize: 1e9, OpenFiles: 4096, Output: 64 << 10, Workspace: 1 << 30},
		},
		{" memory=1GiB , processes=2 ", limits.Set{Memory: 1 << 30, Processes: 2}},
		{"memory= 1 MiB", limits.Set{Memory: 1 << 20}},
		{"memory=1MiB,memory=2MiB", limits.Set{Memory: 2 << 20}}, // the last one wins
		{"processes=0", limits.Set{}},
		{"cpu_time=500ms", limits.Set{CPUTime: limits.Duration(500 * time.Millisecond)}},
		{"open_files=2147483647", limits.Set{OpenFiles: math.MaxInt32}},
	}
	for _, tt := range tests {
		got, err := limits.Parse("-limits", tt.in)
		if err != nil {
			t.Errorf("Parse(%q) = %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		flag, in  string
		wantField string
		wantMsg   string
		wantHint  string
	}{
		{"-limits", "bogus=1", "-limits.bogus", "unknown limit", "known: " + limits.Names()},
		{"-limits", "memory=1MiB,Memory=2MiB", "-limits.Memory", "unknown limit", "known: " + limits.Names()},
		{"-max-limits", "cpu=1s", "-max-limits.cpu", "unknown limit", "known: " + limits.Names()},
		{"-limits", "memory", "-limits", `"memory" is not key=value`, "e.g."},
		{"-limits", "memory=1MiB,", "-limits", "is not key=value", "e.g."},
		{"-limits", ",memory=1MiB", "-limits", "is not key=value", "e.g."},
		{"-limits", "memory:1MiB", "-limits", "is not key=value", "e.g."},
		{"-limits", "memory=abc", "-limits.memory", "is not a size", ""},
		{"-limits", "memory=-1", "-limits.memory", "is not a size", ""},
		{"-limits", "workspace=9999999999TiB", "-limits.workspace", "too large", ""},
		{"-limits", "output=", "-limits.output", "is not a size", ""},
		{"-limits", "cpu_time=10", "-limits.cpu_time", "is not a duration", "30s"},
		{"-limits", "cpu_time=-1s", "-limits.cpu_time", "is not a duration", "30s"},
		{"-limits", "cpu_time=soon", "-limits.cpu_time", "is not a duration", "30s"},
		{"-limits", "processes=-1", "-limits.processes", "is not a count", ""},
		{"-limits", "processes=x", "-limits.processes", "is not a count", ""},
		{"-limits", "processes=1.5", "-limits.processes", "is not a count", ""},
		{"-limits", "open_files=2147483648", "-limits.open_files", "is not a count", ""},
		{"-limits", "open_files=1KiB", "-limits.open_files", "is not a count", ""},
	}
	for _, tt := range tests {
		got, err := limits.Parse(tt.flag, tt.in)
		if err == nil {
			t.Errorf("Parse(%q, %q) = %v, want an error", tt.flag, tt.in, got)
			continue
		}
		fe := fieldErr(t, err)
		if diff := cmp.Diff(tt.wantField, fe.Field); diff != "" {
			t.Errorf("Parse(%q): Field mismatch (-want +got):\n%s", tt.in, diff)
		}
		if !strings.Contains(fe.Msg, tt.wantMsg) {
			t.Errorf("Parse(%q): Msg = %q, want it to contain %q", tt.in, fe.Msg, tt.wantMsg)
		}
		if !strings.Contains(fe.Hint, tt.wantHint) {
			t.Errorf("Parse(%q): Hint = %q, want it to contain %q", tt.in, fe.Hint, tt.wantHint)
		}
	}
}

func TestParseUnknownListsEveryName(t *testing.T) {
	_, err := limits.Parse("-limits", "nope=1")
	fe := fieldErr(t, err)
	for _, n := range setNames() {
		if !strings.Contains(fe.Hint, n) {
			t.Errorf("Hint %q does not list %q", fe.Hint, n)
		}
	}
}

func TestSetString(t *testing.T) {
	tests := []struct {
		in   limits.Set
		want string
	}{
		{limits.Set{}, ""},
		{limits.Set{Memory: 1 << 20, Processes: 2}, "memory=1MiB,processes=2"},
		{limits.Set{Workspace: 1e9, CPUTime: limits.Duration(1500 * time.Millisecond)}, "cpu_time=1.5s,workspace=1000000000"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.in.String()); diff != "" {
			t.Errorf("String() mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestSetStringRoundTrip(t *testing.T) {
	p := limits.DefaultPolicy()
	sets := []limits.Set{
		{},
		p.Default,
		p.Max,
		{Memory: 1},
		{CPUTime: 1},
		{CPUTime: limits.Duration(1500 * time.Millisecond), Output: 1025, Workspace: 1e9},
		{CPUTime: limits.Duration(time.Hour + time.Nanosecond), Processes: 1, OpenFiles: math.MaxInt32},
		{CPUTime: math.MaxInt64, Memory: math.MaxInt64, FileSize: 8388607 << 40},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		var s limits.Set
		for _, m := range members {
			if r.IntN(3) == 0 {
				continue // leave unset
			}
			switch m.name {
			case "processes", "open_files":
				m.set(&s, r.Int64N(math.MaxInt32))
			case "cpu_time":
				m.set(&s, r.Int64N(int64(time.Hour))>>(r.IntN(3)*10))
			default:
				m.set(&s, r.Int64N(1<<40)<<(r.IntN(3)*10)>>(r.IntN(3)*10))
			}
		}
		sets = append(sets, s)
	}
	for _, s := range sets {
		str := s.String()
		got, err := limits.Parse("-limits", str)
		if err != nil {
			t.Errorf("Parse(%q) = %v", str, err)
			continue
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("Parse(String()) of %q mismatch (-want +got):\n%s", str, diff)
		}
	}
}

func TestMerge(t *testing.T) {
	def := limits.DefaultPolicy().Default
	tests := []struct {
		name   string
		s, def limits.Set
		want   limits.Set
	}{
		{"empty takes every default", limits.Set{}, def, def},
		{"full keeps everything", limits.DefaultPolicy().Max, def, limits.DefaultPolicy().Max},
		{"partial", limits.Set{Memory: 1, OpenFiles: 2}, def, func() limits.Set { d := def; d.Memory, d.OpenFiles = 1, 2; return d }()},
		{"empty defaults", limits.Set{Memory: 1}, limits.Set{}, limits.Set{Memory: 1}},
		{"below a default is kept", limits.Set{Processes: 1}, limits.Set{Processes: 64}, limits.Set{Processes: 1}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.s.Merge(tt.def)); diff != "" {
			t.Errorf("%s: Merge mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
	// Every member is merged.
	for _, m := range members {
		var d limits.Set
		m.set(&d, 5)
		if got := m.get(limits.Set{}.Merge(d)); got != 5 {
			t.Errorf("Merge does not fill %s: got %d, want 5", m.name, got)
		}
	}
}

func TestClamp(t *testing.T) {
	max := limits.DefaultPolicy().Max
	tests := []struct {
		name   string
		s, max limits.Set
		want   limits.Set
	}{
		{"below max unchanged", limits.DefaultPolicy().Default, max, limits.DefaultPolicy().Default},
		{"at max unchanged", max, max, max},
		{"empty unchanged", limits.Set{}, max, limits.Set{}},
		{"above max lowered", limits.Set{Memory: max.Memory + 1, Processes: 1}, max, limits.Set{Memory: max.Memory, Processes: 1}},
		{"unset max does not clamp", limits.Set{Memory: 1 << 40}, limits.Set{Processes: 1}, limits.Set{Memory: 1 << 40}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.s.Clamp(tt.max)); diff != "" {
			t.Errorf("%s: Clamp mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
	// Every member is clamped.
	for _, m := range members {
		var s, mx limits.Set
		m.set(&s, 10)
		m.set(&mx, 3)
		if got := m.get(s.Clamp(mx)); got != 3 {
			t.Errorf("Clamp does not lower %s: got %d, want 3", m.name, got)
		}
	}
}

func TestPolicyCheck(t *testing.T) {
	if err := limits.DefaultPolicy().Check(); err != nil {
		t.Fatalf("DefaultPolicy().Check() = %v, want nil", err)
	}
	type tc struct {
		name      string
		mod       func(*limits.Policy)
		wantField string // empty: valid
	}
	tests := []tc{
		{"default equal to max", func(p *limits.Policy) { p.Default = p.Max; p.DefaultTimeout = p.MaxTimeout }, ""},
		{"default timeout above max", func(p *limits.Policy) { p.DefaultTimeout = p.MaxTimeout + 1 }, "timeout"},
		{"max timeout missing", func(p *limits.Policy) { p.MaxTimeout = 0 }, "timeout"},
		{"default timeout missing", func(p *limits.Policy) { p.DefaultTimeout = 0 }, "timeout"},
		{"timeouts negative", func(p *limits.Policy) { p.DefaultTimeout, p.MaxTimeout = -2, -1 }, "timeout"},
		{"network allowed", func(p *limits.Policy) { p.AllowNetwork = true }, ""},
	}
	for _, m := range members {
		tests = append(tests,
			tc{"default " + m.name + " above max", func(p *limits.Policy) { m.set(&p.Default, m.get(p.Max)+1) }, "default." + m.name},
			tc{"default " + m.name + " missing", func(p *limits.Policy) { m.set(&p.Default, 0) }, "default." + m.name},
			tc{"default " + m.name + " negative", func(p *limits.Policy) { m.set(&p.Default, -1) }, "default." + m.name},
			tc{"max " + m.name + " missing", func(p *limits.Policy) { m.set(&p.Max, 0) }, "max." + m.name},
			tc{"max " + m.name + " negative", func(p *limits.Policy) { m.set(&p.Max, -1) }, "max." + m.name},
		)
	}
	for _, tt := range tests {
		p := limits.DefaultPolicy()
		tt.mod(&p)
		err := p.Check()
		if tt.wantField == "" {
			if err != nil {
				t.Errorf("%s: Check() = %v, want nil", tt.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: Check() = nil, want an error for %s", tt.name, tt.wantField)
			continue
		}
		fe := fieldErr(t, err)
		if diff := cmp.Diff(tt.wantField, fe.Field); diff != "" {
			t.Errorf("%s: Field mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
	if err := (limits.Policy{}).Check(); err == nil {
		t.Error("zero Policy.Check() = nil, want an error")
	}
}

func TestPolicyResolve(t *testing.T) {
	p := limits.DefaultPolicy()
	tests := []struct {
		name  string
		asked limits.Set
		want  limits.Set
	}{
		{"empty takes the defaults", limits.Set{}, p.Default},
		{"exactly max", p.Max, p.Max},
		{"partial", limits.Set{Memory: 1 << 20, CPUTime: limits.Duration(time.Second)}, func() limits.Set {
			d := p.Default
			d.Memory, d.CPUTime = 1<<20, limits.Duration(time.Second)
			return d
		}()},
		{"above a default, below max", limits.Set{Processes: p.Default.Processes + 1}, func() limits.Set {
			d := p.Default
			d.Processes++
			return d
		}()},
	}
	for _, tt := range tests {
		got, err := p.Resolve("limits", tt.asked)
		if err != nil {
			t.Errorf("%s: Resolve = %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: Resolve mismatch (-want +got):\n%s", tt.name, diff)
		}
		for _, m := range members {
			if m.get(got) <= 0 {
				t.Errorf("%s: resolved %s = %d, want it set", tt.name, m.name, m.get(got))
			}
		}
	}

	for _, m := range members {
		for _, c := range []struct {
			what  string
			v     int64
			hint  bool
			words string
		}{
			{"above max", m.get(p.Max) + 1, true, "above the worker's maximum"},
			{"far above max", m.get(p.Max) * 1000, true, "above the worker's maximum"},
			{"negative", -1, false, "negative"},
		} {
			var asked limits.Set
			m.set(&asked, c.v)
			got, err := p.Resolve("spec.limits", asked)
			if err == nil {
				t.Errorf("%s %s: Resolve = %v, want an error", m.name, c.what, got)
				continue
			}
			if diff := cmp.Diff(limits.Set{}, got); diff != "" {
				t.Errorf("%s %s: Resolve returned a set with its error (-want +got):\n%s", m.name, c.what, diff)
			}
			fe := fieldErr(t, err)
			if diff := cmp.Diff("spec.limits."+m.name, fe.Field); diff != "" {
				t.Errorf("%s %s: Field mismatch (-want +got):\n%s", m.name, c.what, diff)
			}
			if !strings.Contains(fe.Msg, c.words) {
				t.Errorf("%s %s: Msg = %q, want it to contain %q", m.name, c.what, fe.Msg, c.words)
			}
			if c.hint && fe.Hint == "" {
				t.Errorf("%s %s: no hint", m.name, c.what)
			}
		}
	}

	// The message shows both values in the member's own units.
	_, err := p.Resolve("limits", limits.Set{Memory: p.Max.Memory * 2})
	fe := fieldErr(t, err)
	if fe.Field != "limits.memory" {
		t.Errorf("Field = %q, want limits.memory", fe.Field)
	}
	for _, want := range []string{(p.Max.Memory * 2).String(), p.Max.Memory.String()} {
		if !strings.Contains(fe.Msg, want) {
			t.Errorf("Msg = %q, want it to mention %s", fe.Msg, want)
		}
	}
	_, err = p.Resolve("limits", limits.Set{CPUTime: p.Max.CPUTime + limits.Duration(time.Second)})
	if fe := fieldErr(t, err); !strings.Contains(fe.Msg, (p.Max.CPUTime + limits.Duration(time.Second)).String()) {
		t.Errorf("Msg = %q, want the duration in Go syntax", fe.Msg)
	}
}

// TestOutputTotalDefaults: a step may write 16 MiB to stdout and stderr
// together by default, at most 1 GiB, and an operator sets both through
// the flags' syntax.
func TestOutputTotalDefaults(t *testing.T) {
	p := limits.DefaultPolicy()
	if p.Default.OutputTotal != 16<<20 || p.Max.OutputTotal != 1<<30 {
		t.Errorf("output_total default %s, max %s; want 16MiB, 1GiB", p.Default.OutputTotal, p.Max.OutputTotal)
	}
	max, err := limits.Parse("-max-limits", "output_total=2GiB")
	if err != nil || max.OutputTotal != 2<<30 {
		t.Fatalf("Parse(output_total=2GiB) = %+v, %v", max, err)
	}
	if _, err := p.Resolve("limits", limits.Set{OutputTotal: 1<<30 + 1}); err == nil {
		t.Error("a spec's output_total above the maximum was accepted")
	}
}

// TestPolicyJSONWithoutOutputTotal: a policy published by a worker that
// predates output_total reads as coherent, with the built-in default and
// maximum; one that has them keeps its own.
func TestPolicyJSONWithoutOutputTotal(t *testing.T) {
	old := limits.DefaultPolicy()
	old.Default.OutputTotal, old.Max.OutputTotal = 0, 0
	old.Max.Memory = 1 << 30
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "output_total") {
		t.Fatalf("the old policy names output_total: %s", b)
	}
	var p limits.Policy
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(); err != nil {
		t.Errorf("an old worker's policy is incoherent once read: %v", err)
	}
	d := limits.DefaultPolicy()
	if p.Default.OutputTotal != d.Default.OutputTotal || p.Max.OutputTotal != d.Max.OutputTotal || p.Max.Memory != 1<<30 {
		t.Errorf("read %+v", p)
	}
	own := limits.DefaultPolicy()
	own.Default.OutputTotal, own.Max.OutputTotal = 1<<20, 2<<20
	b, _ = json.Marshal(own)
	if err := json.Unmarshal(b, &p); err != nil || p.Default.OutputTotal != 1<<20 || p.Max.OutputTotal != 2<<20 {
		t.Errorf("a policy with output_total read as %+v, %v", p, err)
	}
	if err := json.Unmarshal([]byte(`{"default": 3}`), &p); err == nil {
		t.Error("a malformed policy was read")
	}
}

// A profile fills what a spec left out, the spec's own values win, and the
// operator's maximums bound what it gives; an operator's flag takes a
// profile's values.
func TestProfiles(t *testing.T) {
	p := limits.DefaultPolicy()
	browser := limits.Profiles["browser"]
	for _, tc := range []struct {
		name      string
		policy    limits.Policy
		asked     limits.Set
		want      limits.Set
		wantField string
		wantIn    string
	}{
		{name: "profile fills", policy: p, asked: limits.Set{Profile: "browser"},
			want: browser.Merge(p.Default)},
		{name: "the spec's own value wins", policy: p, asked: limits.Set{Profile: "browser", Processes: 100},
			want: limits.Set{Processes: 100}.Merge(browser).Merge(p.Default)},
		{name: "unknown", policy: p, asked: limits.Set{Profile: "gpu"},
			wantField: "limits.profile", wantIn: `unknown profile "gpu" (known: browser)`},
		{name: "above an operator's lowered maximum", policy: func() limits.Policy {
			q := p
			q.Max.Processes = 64
			return q
		}(), asked: limits.Set{Profile: "browser"},
			wantField: "limits.processes", wantIn: "256 (profile browser) is above the worker's maximum 64 (the operator allows it with -max-limits processes=256 or more (-max-limits profile=browser sets every maximum to the profile's values, a value the flag gives itself winning))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.policy.Resolve("limits", tc.asked)
			if tc.wantField != "" {
				fe := fieldErr(t, err)
				if fe.Field != tc.wantField || !strings.Contains(fe.Error(), tc.wantIn) {
					t.Fatalf("error %v, want field %s with %q", err, tc.wantField, tc.wantIn)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Profile = tc.asked.Profile
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("resolved (-want +got):\n%s", diff)
			}
		})
	}
	// The operator's flag: the profile's values, its own win, no name kept.
	got, err := limits.Parse("-max-limits", "processes=300,profile=browser")
	if err != nil {
		t.Fatal(err)
	}
	want := browser
	want.Processes = 300
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-max-limits profile=browser (-want +got):\n%s", diff)
	}
	for _, v := range []string{"profile=gpu", "profile=", "profile=browser,profile="} {
		if _, err := limits.Parse("-max-limits", v); fieldErr(t, err).Field != "-max-limits.profile" {
			t.Errorf("-max-limits %s: %v", v, err)
		}
	}
	// The default maximums allow the browser profile as it is.
	if _, err := p.Resolve("limits", limits.Set{Profile: "browser"}); err != nil {
		t.Errorf("default maximums refuse the browser profile: %v", err)
	}
}
