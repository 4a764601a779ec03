//go:build linux

package worker

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/secrets"
)

// TestLiveRedactsAcrossReads: a secret's value cut between two reads of a
// stream never goes out live, whole or in part; everything else does, in
// order, and the whole equals what the record keeps (redacted).
func TestLiveRedactsAcrossReads(t *testing.T) {
	const value = "tok-5ecr3t-VALUE"
	t.Setenv(secrets.EnvPrefix+"TOKEN", value)
	set, err := secrets.Source{}.Load([]string{"TOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	text := "line one\nthe token is " + value + " and again " + value + "\nünïcödé end\n"
	for cut := 1; cut < len(text); cut += 3 {
		l := &liveStep{secrets: set, step: "s"}
		l.add(sandbox.Stdout, []byte(text[:cut]))
		l.add(sandbox.Stdout, []byte(text[cut:]))
		l.release(sandbox.Stdout, true)
		var got strings.Builder
		for _, o := range l.ready {
			if strings.Contains(o.Data, "5ecr3t") || o.Encoding != "" {
				t.Fatalf("cut %d: a piece %+v", cut, o)
			}
			got.WriteString(o.Data)
		}
		if want := set.Redact(text); got.String() != want {
			t.Fatalf("cut %d: %q, want %q", cut, got.String(), want)
		}
	}
}
