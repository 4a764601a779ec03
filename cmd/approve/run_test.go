package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/testkit/testclock"
	"github.com/airlock-run/airlock/record"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// binary is the command built once by TestMain, for tests that run it in
// processes of its own.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "approve-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "approve")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building approve: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(redistest.GoleakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// now is the clock of the command in tests: testclock's epoch, which
// .ci/run shifts a year each way to find fixtures that meet the real clock.
var now = testclock.Epoch()

// rfc3339 is how the command prints an instant in its messages.
func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// result is what a run of the command gave.
type result struct {
	Code           int
	Stdout, Stderr string
}

// approveCmd runs the command with -redis and -prefix then args, with the
// clock at now.
func approveCmd(t *testing.T, prefix string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args = append([]string{"-redis", redistest.URL(t), "-prefix", prefix}, args...)
	code := run(ctx, args, &env{now: func() time.Time { return now }, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr})
	return result{code, stdout.String(), stderr.String()}
}

// fixture parks the approvals the golden files show, in a fresh prefix,
// and returns the prefix and its queue.
func fixture(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	prefix, q := approvetest.Prefix(t)
	rdb := redistest.Client(t)
	at := now
	st := approve.NewStore(rdb, approve.Options{Prefix: prefix, Now: func() time.Time { return at }})
	parkOne := func(a *approve.Approval, data map[string][]byte) {
		t.Helper()
		if _, created, err := st.Park(ctx, a, data); err != nil || !created {
			t.Fatalf("Park(%s): %v", a.ID, err)
		}
	}

	// A rich one, for show.
	rows := make([]map[string]any, 30)
	for i := range rows {
		rows[i] = map[string]any{"region": fmt.Sprintf("r%02d", i), "amount": i * 10}
	}
	res, _ := json.Marshal(map[string]any{"total": 4350, "rows": rows})
	csv := "region,amount\neu,10\nus,32\nasia\t7\nred\x1b[31m,1\nsixth,6\nseventh,7\n"
	js := `{"total": 4350}` + "\n"
	png := bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 0}, 300)
	zero, one := 0, 1
	parkOne(&approve.Approval{
		ID: "ap-0a1b2c3d4e5f", TaskID: "6f1c2b7e-0d1e-4a55-9a3e-8d2c1b0a9f8e", RunID: "report-2026-12-02",
		State: approve.StatePending, CreatedAt: now.Add(-3 * time.Minute),
		Reasons: []string{"spec asks for approval: always", "artifacts matched out/*.csv, out/*.png",
			"a reason long enough to wrap: the result holds more than twenty rows, above the policy's limit for auto-promotion"},
		Result: res,
		Artifacts: []record.Artifact{
			{Name: "out/report.csv", ContentType: "text/csv; charset=utf-8"},
			{Name: "out/summary.json", ContentType: "application/json"},
			{Name: "out/chart.png", ContentType: "image/png"},
			{Name: "out/notes.txt", Bytes: 12, SHA256: strings.Repeat("ab", 32), ContentType: "text/plain"},
			{Name: "out/" + strings.Repeat("very-long-directory-name/", 4) + "file.csv", ContentType: "text/csv"},
		},
		Run: approve.RunSummary{
			Queue: q, Attempt: 2, StepsMS: 2215.1, Worker: "host/1603 0.1.0-dev",
			Steps: []approve.StepSummary{
				{Name: "sum", Argv: []string{"sh", "sum.sh"}, Verdict: "ok", ExitCode: &zero, CPUMS: 12.4},
				{Name: "render-chart", Argv: []string{"python3", "-c", "import chart; chart.render('out/chart.png', width=1200, height=800)"}, Verdict: "ok", ExitCode: &zero, CPUMS: 840},
				{Name: "check", Argv: []string{"sh", "-c", "exit 1"}, Verdict: "exit", ExitCode: &one, CPUMS: 0.4},
			},
		},
	}, map[string][]byte{
		"out/report.csv": []byte(csv), "out/summary.json": []byte(js), "out/chart.png": png,
		"out/" + strings.Repeat("very-long-directory-name/", 4) + "file.csv": []byte("a\n"),
	})
	parkOne(&approve.Approval{
		ID: "ap-1b2c3d4e5f60", TaskID: "t2", RunID: "nightly-export-with-a-very-long-run-identifier-0001",
		State: approve.StatePending, CreatedAt: now.Add(-2*time.Hour - 5*time.Minute),
		Reasons: []string{"output above 1 MiB", "network: true", "artifacts matched out/*.parquet, out/*.csv and out/extra/*"},
		Run:     approve.RunSummary{Queue: q, Attempt: 1},
	}, nil)
	parkOne(&approve.Approval{
		ID: "ap-2c3d4e5f6071", TaskID: "t3", RunID: "x\x1b[31mred\u202e",
		State: approve.StatePending, CreatedAt: now.Add(-26 * time.Hour),
		Reasons: []string{"policy: approval for queue reports"},
		Run:     approve.RunSummary{Queue: q, Attempt: 1},
	}, nil)
	parkOne(&approve.Approval{
		ID: "ap-3d4e5f607182", TaskID: "t4", State: approve.StatePending, CreatedAt: now.Add(-5 * 24 * time.Hour),
		ExpiresAt: now.Add(-time.Minute), Reasons: []string{"expired, not yet swept"}, Run: approve.RunSummary{Queue: q},
	}, nil)
	parkOne(&approve.Approval{
		ID: "ap-4e5f60718293", TaskID: "t5", RunID: "accepted-run", State: approve.StatePending,
		CreatedAt: now.Add(-90 * time.Minute), Reasons: []string{"approval: always"},
		Result: []byte(`{"ok":true}`), Run: approve.RunSummary{Queue: q, Attempt: 1, StepsMS: 0.42},
	}, nil)
	at = now.Add(-time.Hour)
	if _, err := st.Accept(ctx, "ap-4e5f60718293", "alice", "looks right; the totals match last week's report within a percent, so it can go out"); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPromoted(ctx, "ap-4e5f60718293", now.Add(-59*time.Minute), ""); err != nil {
		t.Fatal(err)
	}
	parkOne(&approve.Approval{
		ID: "ap-5f6071829304", TaskID: "t6", RunID: "rejected-run", State: approve.StatePending,
		CreatedAt: now.Add(-80 * time.Minute), Reasons: []string{"approval: always"}, Run: approve.RunSummary{Queue: q},
	}, nil)
	at = now.Add(-30 * time.Minute)
	if _, err := st.Reject(ctx, "ap-5f6071829304", "bob", "wrong totals"); err != nil {
		t.Fatal(err)
	}
	at = now.Add(-10 * time.Minute)
	parkOne(&approve.Approval{
		ID: "ap-6071829304a5", TaskID: "t7", RunID: "auto", State: approve.StateAccepted, DecidedBy: "policy:default",
		CreatedAt: now.Add(-10 * time.Minute), Reasons: []string{}, Run: approve.RunSummary{Queue: q},
	}, nil)
	return prefix, q
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	// Printed instants are the epoch's: moved back by the clock's shift.
	got = testclock.Unshift(got)
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
	for i, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if w := width(l); w > lineWidth {
			t.Errorf("%s line %d is %d columns wide: %q", name, i+1, w, l)
		}
	}
}

// The queue name in the golden files.
const goldenQueue = "t-xxxxxxxxxxxx"

func TestGolden(t *testing.T) {
	t.Parallel()
	prefix, q := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"list", []string{"list"}},
		{"list-all", []string{"list", "-state", "all", "-limit", "0"}},
		{"list-accepted", []string{"list", "-state", "accepted"}},
		{"list-expired", []string{"list", "-state=expired"}},
		{"show", []string{"show", "ap-0a1b2c3d4e5f"}},
		{"show-accepted", []string{"show", "ap-4e5f60718293"}},
		{"show-rejected", []string{"show", "ap-5f6071829304"}},
		{"history", []string{"history", "ap-4e5f60718293"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := approveCmd(t, prefix, tc.args...)
			if got.Code != 0 || got.Stderr != "" {
				t.Fatalf("%q: %+v", tc.args, got)
			}
			golden(t, tc.name, strings.ReplaceAll(got.Stdout, q, goldenQueue))
		})
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	prefix, q := fixture(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // the whole of it, when not ""
		stderr string // a part of it, when not ""
	}{
		{[]string{"list"}, 0, "", ""},
		{[]string{"-h"}, 0, "usage: approve [flags] COMMAND", ""},
		{[]string{"help"}, 0, "", ""},
		{[]string{"accept", "-h"}, 0, "usage: approve accept ID", ""},
		{[]string{}, 2, "", "approve: want a command"},
		{[]string{"bogus"}, 2, "", `approve: unknown command "bogus"`},
		{[]string{"show"}, 2, "", "want one argument, ID"},
		{[]string{"show", "a", "b"}, 2, "", "want one argument, ID, got 2"},
		{[]string{"list", "-state", "bogus"}, 2, "", "approve list: -state: unknown state \"bogus\""},
		{[]string{"list", "-nope"}, 2, "", "approve list: flag provided but not defined: -nope (see approve list -h)\n"},
		{[]string{"-redis", "://bad", "list"}, 1, "", "-redis"},
		{[]string{"-prefix", "a{b}", "list"}, 2, "", "brace"},
		{[]string{"-json", "show", "ap-nope"}, 3, `{"error":"approval not found: ap-nope","code":3}` + "\n", ""},
		{[]string{"show", "ap-nope"}, 3, "", "approval not found: ap-nope"},
		{[]string{"history", "ap-nope"}, 3, "", "approval not found"},
		{[]string{"accept", "ap-nope", "-by", "carol"}, 3, "", "approval not found"},
		{[]string{"reject", "ap-nope", "-by", "carol", "-comment", "x"}, 3, "", "approval not found"},
		// A reject without -comment is a usage error (exit 2), as the README says.
		{[]string{"reject", "ap-1b2c3d4e5f60", "-by", "carol"}, 2, "", "approve reject: -comment TEXT is required: say why it is rejected\n"},
		{[]string{"reject", "ap-1b2c3d4e5f60", "-comment", " "}, 2, "", "-comment TEXT is required"},
		{[]string{"-json", "reject", "ap-1b2c3d4e5f60"}, 2, `{"error":"-comment TEXT is required: say why it is rejected","code":2}` + "\n", ""},
		{[]string{"-version"}, 0, airlock.Version + "\n", ""},
		{[]string{"list", "-version"}, 0, airlock.Version + "\n", ""},
		// A connection error names the URL and where it came from.
		{[]string{"-redis", "127.0.0.1:1", "list"}, 1, "", "approve list: Redis redis://127.0.0.1:1/0 (from -redis): "},
		{[]string{"accept", "ap-4e5f60718293", "-by", "carol"}, 4, "",
			"approval ap-4e5f60718293 was already accepted by alice at " + rfc3339(now.Add(-time.Hour))},
		{[]string{"reject", "ap-5f6071829304", "-by", "carol", "-comment", "no"}, 4, "",
			"approval ap-5f6071829304 was already rejected by bob at " + rfc3339(now.Add(-30*time.Minute))},
		{[]string{"accept", "ap-3d4e5f607182", "-by", "carol"}, 4, "", "approval ap-3d4e5f607182 expired at " + rfc3339(now.Add(-time.Minute))},
		// Flags before and after the command and its argument.
		{[]string{"-by", "carol", "accept", "ap-0a1b2c3d4e5f", "-comment", "ok"}, 0, "accepted ap-0a1b2c3d4e5f; promotion queued\n", ""},
		{[]string{"reject", "ap-1b2c3d4e5f60", "-by", "dave", "-comment", "bad totals"}, 0, "rejected ap-1b2c3d4e5f60\n", ""},
		{[]string{"accept", "-by=erin", "--", "ap-2c3d4e5f6071"}, 0, "accepted ap-2c3d4e5f6071; promotion queued\n", ""},
	} {
		got := approveCmd(t, prefix, tc.args...)
		if got.Code != tc.code || (tc.stdout != "" && !strings.HasPrefix(got.Stdout, tc.stdout)) || !strings.Contains(got.Stderr, tc.stderr) || strings.Count(got.Stderr, "\n") > 1 {
			t.Errorf("approve %q: got %+v\nwant exit %d, stdout %q, stderr with %q", tc.args, got, tc.code, tc.stdout, tc.stderr)
		}
	}
	// The accepts queued the promotions.
	insp := asynq.NewInspectorFromRedisClient(redistest.Client(t))
	for _, id := range []string{"ap-0a1b2c3d4e5f", "ap-2c3d4e5f6071"} {
		info, err := insp.GetTaskInfo(q, approve.TaskID(id))
		if err != nil || info.Type != approve.TypePromote {
			t.Errorf("promotion of %s: %+v, %v", id, info, err)
		}
	}
	h := approveCmd(t, prefix, "history", "-json", "ap-0a1b2c3d4e5f")
	var events []approve.Event
	if err := json.Unmarshal([]byte(h.Stdout), &events); err != nil || len(events) != 2 ||
		events[1].By != "carol" || events[1].Comment != "ok" {
		t.Errorf("history after accept: %+v, %v", events, err)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	prefix, q := fixture(t)
	type withResult struct {
		approve.Approval
		Result json.RawMessage `json:"result"`
	}
	got := approveCmd(t, prefix, "-json", "list")
	var list []approve.Summary
	if err := json.Unmarshal([]byte(got.Stdout), &list); err != nil || got.Code != 0 {
		t.Fatalf("list -json: %v: %+v", err, got)
	}
	var ids []string
	for _, a := range list {
		ids = append(ids, a.ID)
		if a.Queue != q || a.State != approve.StatePending {
			t.Errorf("list -json: %+v", a)
		}
	}
	if want := []string{"ap-0a1b2c3d4e5f", "ap-1b2c3d4e5f60", "ap-2c3d4e5f6071"}; !cmp.Equal(ids, want) {
		t.Errorf("list -json ids %q, want %q", ids, want)
	}

	got = approveCmd(t, prefix, "show", "ap-0a1b2c3d4e5f", "-json")
	var a withResult
	if err := json.Unmarshal([]byte(got.Stdout), &a); err != nil || got.Code != 0 {
		t.Fatalf("show -json: %v: %+v", err, got)
	}
	var res struct{ Total int }
	if err := json.Unmarshal(a.Result, &res); err != nil || res.Total != 4350 || len(a.Artifacts) != 5 || len(a.Run.Steps) != 3 {
		t.Errorf("show -json: result %s (%v), %d artifacts, %d steps", a.Result, err, len(a.Artifacts), len(a.Run.Steps))
	}

	got = approveCmd(t, prefix, "-json", "-by", "carol", "accept", "ap-1b2c3d4e5f60")
	if err := json.Unmarshal([]byte(got.Stdout), &a); err != nil || a.State != approve.StateAccepted || a.DecidedBy != "carol" {
		t.Errorf("accept -json: %+v, %v", got, err)
	}
	got = approveCmd(t, prefix, "-json", "list", "-state", "nothing-here")
	if got.Code != 2 || !strings.HasPrefix(got.Stdout, `{"error":"-state: unknown state`) || got.Stderr != "" {
		t.Errorf("list of a bad state: %+v", got)
	}
	// list -json holds no empty run or artifacts standing in for what a
	// list does not read.
	got = approveCmd(t, prefix, "-json", "list")
	if strings.Contains(got.Stdout, `"run"`) || strings.Contains(got.Stdout, `"artifacts"`) {
		t.Errorf("list -json prints placeholders:\n%s", got.Stdout)
	}
}

// TestAcceptProcesses races approve accept in processes of their own:
// exactly one wins, the others are told who won.
//
// The binaries read the real clock, so the approval they race for is
// parked at the real clock too: one parked at the fixtures' epoch would
// expire, for them, 72 hours after that epoch.
func TestAcceptProcesses(t *testing.T) {
	t.Parallel()
	prefix, q := approvetest.Prefix(t)
	st := approve.NewStore(redistest.Client(t), approve.Options{Prefix: prefix, Now: time.Now})
	if _, created, err := st.Park(context.Background(), &approve.Approval{
		ID: "ap-0a1b2c3d4e5f", TaskID: "t-race", RunID: "race", State: approve.StatePending,
		CreatedAt: time.Now(), Reasons: []string{"approval: always"}, Run: approve.RunSummary{Queue: q},
	}, nil); err != nil || !created {
		t.Fatalf("Park: created %v, %v", created, err)
	}
	const n = 8
	type outcome struct {
		code   int
		stdout string
		stderr string
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(binary, "-redis", redistest.URL(t), "-prefix", prefix,
				"accept", "ap-0a1b2c3d4e5f", "-by", fmt.Sprintf("user%d", i), "-comment", "race")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				code = -1
			}
			out[i] = outcome{code, stdout.String(), stderr.String()}
		}()
	}
	wg.Wait()
	winner := -1
	for i, o := range out {
		if o.code == 0 {
			if winner >= 0 {
				t.Fatalf("two winners: user%d and user%d", winner, i)
			}
			winner = i
			if o.stdout != "accepted ap-0a1b2c3d4e5f; promotion queued\n" {
				t.Errorf("winner's output: %q", o.stdout)
			}
		}
	}
	if winner < 0 {
		t.Fatalf("no winner: %+v", out)
	}
	for i, o := range out {
		if i == winner {
			continue
		}
		want := fmt.Sprintf("approve accept: approval ap-0a1b2c3d4e5f was already accepted by user%d at ", winner)
		if o.code != 4 || !strings.HasPrefix(o.stderr, want) {
			t.Errorf("user%d: exit %d, stderr %q; want exit 4 and %q…", i, o.code, o.stderr, want)
		}
	}
	info, err := asynq.NewInspectorFromRedisClient(redistest.Client(t)).GetTaskInfo(q, approve.TaskID("ap-0a1b2c3d4e5f"))
	if err != nil || info.Queue != q {
		t.Errorf("promotion task: %+v, %v", info, err)
	}
}

// syncBuffer collects log lines its writers append concurrently.
type syncBuffer = logtest.Buffer

func TestWatch(t *testing.T) {
	t.Parallel()
	prefix, q := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-redis", redistest.URL(t), "-prefix", prefix, "watch"},
			&env{now: time.Now, stdout: &stdout, stderr: &stderr})
	}()
	st := approve.NewStore(redistest.Client(t), approve.Options{Prefix: prefix})
	parkID := func(id string) {
		t.Helper()
		if _, _, err := st.Park(context.Background(), &approve.Approval{
			ID: id, RunID: "fresh", State: approve.StatePending, CreatedAt: now,
			Reasons: []string{"approval: always"}, Run: approve.RunSummary{Queue: q},
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(suffix string) bool {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.HasSuffix(stdout.String(), suffix) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return strings.HasSuffix(stdout.String(), suffix)
	}
	// Park sentinels until watch prints one: it then reads the stream.
	for i := 0; ; i++ {
		parkID(fmt.Sprintf("ap-s%d", i))
		time.Sleep(100 * time.Millisecond)
		if stdout.String() != "" {
			break
		}
	}
	parkID("ap-new")
	want := now.UTC().Format("2006-01-02 15:04:05Z07:00") + "  ap-new  fresh  approval: always\n"
	waitFor(want)
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.HasSuffix(stdout.String(), want) || stderr.String() != "" {
			t.Errorf("watch: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout.String(), stderr.String(), want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end with its context")
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":          "plain",
		"a\x1b[31mred":   `a\x1b[31mred`,
		"tab\there":      "tab here",
		"bidi\u202eevil": `bidi\u202eevil`,
		"bad\xffutf8":    `bad\xffutf8`,
		"line\nbreak":    `line\x0abreak`,
		"wide 漢字":        "wide 漢字",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
	for _, tc := range []struct {
		s    string
		w    int
		want string
	}{
		{"abcdef", 6, "abcdef"},
		{"abcdef", 5, "abcd…"},
		{"漢字漢字", 5, "漢字…"},
		{"abc", 0, ""},
	} {
		if got := fit(tc.s, tc.w); got != tc.want || width(got) > tc.w {
			t.Errorf("fit(%q, %d) = %q, want %q", tc.s, tc.w, got, tc.want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 3 << 20: "3.0 MiB"} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
	if got := wrap("aaa bbb ccc dddddddddd", 7); !cmp.Equal(got, []string{"aaa bbb", "ccc", "ddddddd", "ddd"}) {
		t.Errorf("wrap = %q", got)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c := fs.String("comment", "", "")
	j := fs.Bool("json", false, "")
	pos, err := parseInterspersed(fs, []string{"ID", "-comment", "ok", "-json", "--", "-x"}, &env{stdout: io.Discard, stderr: io.Discard})
	if err != nil || !cmp.Equal(pos, []string{"ID", "-x"}) || *c != "ok" || !*j {
		t.Errorf("parseInterspersed: %q, %v, comment %q, json %v", pos, err, *c, *j)
	}
}

// TestHelpListsCommandFlags: approve -h lists each command's own flags
// under it, not only the global ones.
func TestHelpListsCommandFlags(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"-h"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	help := out.String()
	// Each command line, then its flags, before the next command.
	order := []string{"\n  list ", "-limit int", "-state string", "\n  show ID ", "\n  accept ID ", "-comment string", "why (optional)",
		"\n  reject ID ", "-comment string", "why (required)", "\n  watch ", "-since string", "\n  history ID ", "flags (before or after the command):", "-redis URL", "-version"}
	at := 0
	for _, s := range order {
		i := strings.Index(help[at:], s)
		if i < 0 {
			t.Fatalf("approve -h: %q missing after offset %d:\n%s", s, at, help)
		}
		at += i + len(s)
	}
}
