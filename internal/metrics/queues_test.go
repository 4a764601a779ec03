package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-run/airlock/record"
)

// Before any run, every counter with labels is exposed at 0 for each of
// its known values, on each queue New was given and on no other: a first
// event is then an increase() of 1, not a series that appears.
func TestPreinitialised(t *testing.T) {
	m := New("v", "q1", "q2", "q1")
	body := scrape(t, m)
	var want []string
	for _, q := range []string{"q1", "q2"} {
		for _, k := range outcomes() {
			want = append(want, NameTasks+`{queue="`+q+`",state="`+string(k.state)+`",verdict="`+string(k.verdict)+`"} 0`)
		}
		want = append(want,
			NameInputBytes+`{queue="`+q+`"} 0`, NameFilesBytes+`{queue="`+q+`"} 0`,
			NameEgressBytes+`{direction="up",queue="`+q+`"} 0`, NameEgressBytes+`{direction="down",queue="`+q+`"} 0`,
			NameTaskDuration+`_count{queue="`+q+`"} 0`, NameStepDuration+`_count{queue="`+q+`"} 0`)
	}
	for _, r := range []string{Published, Already, Refused, Failed} {
		want = append(want, NamePromotions+`{result="`+r+`"} 0`)
	}
	for _, op := range []string{OpResult, OpEvents, OpPing, OpQueues} {
		want = append(want, NameRedisErrors+`{op="`+op+`"} 0`)
	}
	for _, w := range want {
		if !strings.Contains(body, "\n"+w+"\n") {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	if n, want := testutil.CollectAndCount(m.tasks), 2*len(outcomes()); n != want {
		t.Errorf("%s: %d series, want %d (outcomes × 2 queues)", NameTasks, n, want)
	}
	if strings.Contains(body, `queue=""`) {
		t.Errorf("queue \"\" exposed before a record of no known queue:\n%s", body)
	}
}

// A record of a queue New was not given counts under queue "": the label
// never takes a value from a record.
func TestUnknownQueue(t *testing.T) {
	m := New("v", "q1")
	m.RunEnded(&record.Run{Queue: "from-a-spec", State: record.StateCompleted, Verdict: record.VerdictOK, Inputs: []record.Input{{Bytes: 7}}})
	m.RunEnded(&record.Run{Queue: "another", State: record.StateCompleted, Verdict: record.VerdictOK})
	m.RunEnded(&record.Run{Queue: "q1", State: record.StateFailed, Verdict: "new_verdict"})
	if n := testutil.ToFloat64(m.tasks.WithLabelValues("", "completed", "ok")); n != 2 {
		t.Errorf(`queue "" completed/ok = %v, want 2`, n)
	}
	if n := testutil.ToFloat64(m.inputBytes.WithLabelValues("")); n != 7 {
		t.Errorf(`queue "" input bytes = %v, want 7`, n)
	}
	if n := testutil.ToFloat64(m.tasks.WithLabelValues("q1", "failed", "new_verdict")); n != 1 {
		t.Errorf("a pair not in outcomes = %v, want 1", n)
	}
	body := scrape(t, m)
	if strings.Contains(body, "from-a-spec") || strings.Contains(body, "another") {
		t.Errorf("a record's queue became a label value:\n%s", body)
	}
}

// outcomes covers every state and every verdict package record declares
// (read from its source): a new one must be added to failVerdicts or
// outcomes, or its first event is missed by increase().
func TestOutcomesCoverRecord(t *testing.T) {
	states, verdicts := recordConsts(t)
	if len(states) < 8 || len(verdicts) < 17 {
		t.Fatalf("read %d states and %d verdicts from record: the parser missed them", len(states), len(verdicts))
	}
	var gotStates []string
	for _, k := range outcomes() {
		gotStates = append(gotStates, string(k.state))
	}
	for _, s := range states {
		if !slices.Contains(gotStates, s) {
			t.Errorf("state %q is in no outcome", s)
		}
	}
	for _, v := range verdicts {
		if v != string(record.VerdictOK) && !slices.Contains(failVerdicts, record.Verdict(v)) {
			t.Errorf("verdict %q is not in failVerdicts", v)
		}
	}
}

// recordConsts returns the values of the constants of types State and
// Verdict in package record's source.
func recordConsts(t *testing.T) (states, verdicts []string) {
	t.Helper()
	names, err := filepath.Glob("../../record/*.go")
	if err != nil || len(names) == 0 {
		t.Fatalf("record's source: %v %v", names, err)
	}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || len(vs.Values) != 1 {
					continue
				}
				lit, ok := vs.Values[0].(*ast.BasicLit)
				if !ok {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					continue
				}
				switch id.Name {
				case "State":
					states = append(states, v)
				case "Verdict":
					verdicts = append(verdicts, v)
				}
			}
		}
	}
	return states, verdicts
}
