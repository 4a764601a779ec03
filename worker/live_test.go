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
		l.release(sandbox.Stdout, true, false)
		got := string(l.ready[sandbox.Stdout])
		if strings.Contains(got, "5ecr3t") {
			t.Fatalf("cut %d: %q", cut, got)
		}
		if want := set.Redact(text); got != want {
			t.Fatalf("cut %d: %q, want %q", cut, got, want)
		}
	}
}

// TestLiveTruncatedAtASecret: a stream cut at its cap right after a
// secret's value sends none of it live (the record redacts, then cuts).
func TestLiveTruncatedAtASecret(t *testing.T) {
	const value = "hunter2hunter2"
	t.Setenv(secrets.EnvPrefix+"PW", value)
	set, err := secrets.Source{}.Load([]string{"PW"})
	if err != nil {
		t.Fatal(err)
	}
	for z := 0; z < set.Longest(); z++ {
		l := &liveStep{secrets: set, step: "s"}
		l.add(sandbox.Stdout, []byte("filler "+value+strings.Repeat("z", z)))
		l.release(sandbox.Stdout, true, true)
		if got := string(l.ready[sandbox.Stdout]); strings.Contains(got, "hunter") {
			t.Errorf("%d bytes after the value, cut: %q", z, got)
		}
	}
}
