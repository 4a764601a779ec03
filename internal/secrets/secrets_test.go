package secrets

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeSecret(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestGetFileWinsOverEnv(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "X", "from-file\n")
	t.Setenv(EnvPrefix+"X", "from-env")
	got, err := Source{Dir: dir}.Get("X")
	if err != nil || got != "from-file" {
		t.Errorf("Get(X) = %q, %v; want from-file", got, err)
	}
}

func TestGetEnv(t *testing.T) {
	t.Setenv(EnvPrefix+"Y", "from-env")
	for _, src := range []Source{{Dir: t.TempDir()}, {}} {
		got, err := src.Get("Y")
		if err != nil || got != "from-env" {
			t.Errorf("Source{%q}.Get(Y) = %q, %v; want from-env", src.Dir, got, err)
		}
	}
	// An empty variable is set all the same.
	t.Setenv(EnvPrefix+"EMPTY", "")
	if got, err := (Source{}).Get("EMPTY"); err != nil || got != "" {
		t.Errorf("Get(EMPTY) = %q, %v; want \"\", nil", got, err)
	}
}

func TestGetMissing(t *testing.T) {
	for _, src := range []Source{{Dir: t.TempDir()}, {}} {
		_, err := src.Get("NOT_THERE_ANYWHERE")
		if !errors.Is(err, ErrMissing) {
			t.Errorf("Source{%q}.Get = %v, want ErrMissing", src.Dir, err)
		}
		if err != nil && !strings.Contains(err.Error(), "NOT_THERE_ANYWHERE") {
			t.Errorf("error %q does not name the secret", err)
		}
	}
}

func TestGetTrimsOneNewline(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]string{
		"value":       "value",
		"value\n":     "value",
		"value\r\n":   "value",
		"value\n\n":   "value\n",
		" value \n":   " value ",
		"multi\nline": "multi\nline",
	}
	got := map[string]string{}
	i := 0
	for content := range tests {
		name := fmt.Sprintf("S%d", i)
		i++
		writeSecret(t, dir, name, content)
		v, err := Source{Dir: dir}.Get(name)
		if err != nil {
			t.Errorf("Get(%q): %v", content, err)
		}
		got[content] = v
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
}

// get runs Get with a deadline: a FIFO must not block it.
func get(t *testing.T, src Source, name string) (string, error) {
	t.Helper()
	type result struct {
		v   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := src.Get(name)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(2 * time.Second):
		t.Fatalf("Get(%s) blocked", name)
		return "", nil
	}
}

func TestGetSize(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "MAX", strings.Repeat("a", maxFile))
	writeSecret(t, dir, "BIG", strings.Repeat("a", maxFile+1))
	if v, err := (Source{Dir: dir}).Get("MAX"); err != nil || len(v) != maxFile {
		t.Errorf("Get(MAX) = %d bytes, %v; want %d", len(v), err, maxFile)
	}
	if v, err := (Source{Dir: dir}).Get("BIG"); err == nil {
		t.Errorf("Get(BIG) = %d bytes, want an error", len(v))
	}
}

func TestGetFollowsSymlink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	writeSecret(t, elsewhere, "real", "linked-value\n")
	if err := os.Symlink(filepath.Join(elsewhere, "real"), filepath.Join(dir, "L")); err != nil {
		t.Fatal(err)
	}
	if v, err := (Source{Dir: dir}).Get("L"); err != nil || v != "linked-value" {
		t.Errorf("Get(L) = %q, %v; want linked-value", v, err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "A", "aaaaaaaa\n")
	t.Setenv(EnvPrefix+"B", "bbbbbbbb")
	set, err := Source{Dir: dir}.Load([]string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"A": set.Value("A"), "B": set.Value("B"), "C": set.Value("C")}
	if diff := cmp.Diff(map[string]string{"A": "aaaaaaaa", "B": "bbbbbbbb", "C": ""}, got); diff != "" {
		t.Errorf("Value (-want +got):\n%s", diff)
	}
	if set.Empty() {
		t.Error("Empty() = true")
	}

	if _, err := (Source{Dir: dir}).Load([]string{"A", "NOPE"}); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("Load with a missing secret: %v", err)
	}
}

func TestLoadMinLength(t *testing.T) {
	t.Setenv(EnvPrefix+"SHORT", "q7z!x") // MinLength-1 bytes
	t.Setenv(EnvPrefix+"EXACT", "q7z!x9")
	_, err := Source{}.Load([]string{"EXACT", "SHORT"})
	if err == nil {
		t.Fatal("Load accepted a value shorter than MinLength")
	}
	if !strings.Contains(err.Error(), "SHORT") || strings.Contains(err.Error(), "q7z!x") {
		t.Errorf("error %q: want the name and never the value", err)
	}
	if _, err := (Source{}).Load([]string{"EXACT"}); err != nil {
		t.Errorf("Load of a MinLength value: %v", err)
	}
}

// No error of Load shows a value, whatever went wrong.
func TestLoadErrorsNeverShowValue(t *testing.T) {
	dir := t.TempDir()
	const v = "Zq9-unique-secret-value"
	writeSecret(t, dir, "BIG", v+strings.Repeat("x", maxFile))
	t.Setenv(EnvPrefix+"TINY", "Zq9")
	for _, name := range []string{"BIG", "TINY"} {
		_, err := Source{Dir: dir}.Load([]string{name})
		if err == nil || strings.Contains(err.Error(), "Zq9") {
			t.Errorf("Load(%s) = %v; want an error without the value", name, err)
		}
	}
}

func load(t *testing.T, values map[string]string, order ...string) *Set {
	t.Helper()
	for n, v := range values {
		t.Setenv(EnvPrefix+n, v)
	}
	set, err := Source{}.Load(order)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestRedactForms(t *testing.T) {
	// 11 bytes (base64 padded): its seven forms all differ.
	v := "p>?s w~rd/+"
	b := []byte(v)
	std, raw := base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b)
	ub, rawURL := base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b)
	q, p := url.QueryEscape(v), url.PathEscape(v)
	forms := []string{v, std, raw, ub, rawURL, q, p}
	for i := range forms {
		for j := range i {
			if forms[i] == forms[j] {
				t.Fatalf("test value: forms %d and %d are both %q", j, i, forms[i])
			}
		}
	}
	set := load(t, map[string]string{"PW": v}, "PW")

	in := fmt.Sprintf("value %s std %s raw %s| url %s rawurl %s| query %s path %s end", v, std, raw, ub, rawURL, q, p)
	want := "value [REDACTED] std [REDACTED] raw [REDACTED]| url [REDACTED] rawurl [REDACTED]| query [REDACTED] path [REDACTED] end"
	if diff := cmp.Diff(want, set.Redact(in)); diff != "" {
		t.Errorf("Redact (-want +got):\n%s", diff)
	}
	gotB, names := set.RedactBytes([]byte(in))
	if diff := cmp.Diff(want, string(gotB)); diff != "" {
		t.Errorf("RedactBytes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"PW"}, names); diff != "" {
		t.Errorf("RedactBytes names (-want +got):\n%s", diff)
	}
	for _, f := range forms {
		if strings.Contains(set.Redact("x"+f+"y"), f) {
			t.Errorf("form %q not redacted", f)
		}
	}
}

func TestRedactBytesNames(t *testing.T) {
	set := load(t, map[string]string{"ZETA": "zeta-secret", "ALPHA": "alpha-secret", "MID": "mid-secret"}, "ZETA", "MID", "ALPHA")
	in := "zeta-secret alpha-secret zeta-secret " + base64.StdEncoding.EncodeToString([]byte("zeta-secret")) + " alpha-secret"
	got, names := set.RedactBytes([]byte(in))
	if diff := cmp.Diff([]string{"ALPHA", "ZETA"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if want := "[REDACTED] [REDACTED] [REDACTED] [REDACTED] [REDACTED]"; string(got) != want {
		t.Errorf("RedactBytes = %q, want %q", got, want)
	}

	// Nothing found: the input, and no names.
	got, names = set.RedactBytes([]byte("nothing here"))
	if string(got) != "nothing here" || names != nil {
		t.Errorf("RedactBytes(nothing) = %q, %v", got, names)
	}
	if s := set.Redact("nothing here"); s != "nothing here" {
		t.Errorf("Redact(nothing) = %q", s)
	}
}

// The longer of two overlapping secrets is masked whole.
func TestRedactOverlap(t *testing.T) {
	set := load(t, map[string]string{"SHORT": "abcdef", "LONG": "abcdefghij"}, "SHORT", "LONG")
	got, names := set.RedactBytes([]byte("<abcdefghij> <abcdef>"))
	if string(got) != "<[REDACTED]> <[REDACTED]>" {
		t.Errorf("RedactBytes = %q", got)
	}
	if diff := cmp.Diff([]string{"LONG", "SHORT"}, names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
}

func TestEmptySet(t *testing.T) {
	empty, err := Source{}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Set{"nil": nil, "loaded": empty, "zero": {}} {
		if !s.Empty() {
			t.Errorf("%s: Empty() = false", name)
		}
		if got := s.Redact("some text abcdef"); got != "some text abcdef" {
			t.Errorf("%s: Redact = %q", name, got)
		}
		in := []byte("some bytes")
		got, names := s.RedactBytes(in)
		if string(got) != "some bytes" || names != nil {
			t.Errorf("%s: RedactBytes = %q, %v", name, got, names)
		}
		if v := s.Value("X"); v != "" {
			t.Errorf("%s: Value = %q", name, v)
		}
	}
}

// TestTrimCut: a secret cut at a cap, at any byte, leaves nothing of
// itself in what is kept; whole ones are left to RedactBytes, and text
// that ends otherwise is kept whole.
func TestTrimCut(t *testing.T) {
	v := "tok-3f9a77c2e1"
	set := load(t, map[string]string{"TOKEN": v}, "TOKEN")
	b64 := base64.StdEncoding.EncodeToString([]byte(v))
	longest := len(b64) // the longest form of v
	for _, form := range []string{v, b64} {
		for n := 1; n < len(form); n++ {
			in := "line one\nthe token is " + form[:n]
			got := string(set.TrimCut([]byte(in)))
			if !strings.HasPrefix("line one\nthe token is ", got) {
				t.Errorf("cut after %d bytes of %q: kept %q", n, form, got)
			}
			// What is dropped does not depend on the text: a right guess
			// of the value's first bytes keeps as much as a wrong one.
			other := "line one\nthe token is " + strings.Repeat("z", n)
			if kept := set.TrimCut([]byte(other)); len(kept) != len(got) || len(got) != max(len(in)-(longest-1), 0) {
				t.Errorf("cut after %d bytes of %q: kept %d bytes, %d of other text of its length; want %d", n, form, len(got), len(kept), max(len(in)-(longest-1), 0))
			}
		}
	}
	if got := string(set.TrimCut([]byte("short"))); got != "" {
		t.Errorf("TrimCut of a text shorter than the longest form = %q, want nothing", got)
	}
	var empty *Set
	if got := string(empty.TrimCut([]byte("abc"))); got != "abc" {
		t.Errorf("an empty set trimmed %q", got)
	}
}
