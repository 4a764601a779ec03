package tasks_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// TestFileModes: a file's object form gives its mode, which Decode keeps
// in FileModes and Encode writes back; a file without one is 0600.
func TestFileModes(t *testing.T) {
	s, err := tasks.Decode([]byte(`{"version": 1, "files": {
		"run.sh": {"text": "#!/bin/sh\necho hi\n", "mode": "0755"},
		"bin/x": {"base64": "AAH/", "mode": "700"},
		"esc": {"text": "e", "m\u006fde": "0640"},
		"plain.txt": "x",
		"text.txt": {"text": "y"}},
		"steps": [{"run": ["./run.sh"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(limits.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	want := map[string]tasks.FileMode{"run.sh": 0o755, "bin/x": 0o700, "esc": 0o640, "plain.txt": 0o600, "text.txt": 0o600}
	for p, m := range want {
		if got := s.Mode(p); got != m {
			t.Errorf("Mode(%q) = %s, want %s", p, got, m)
		}
	}
	if len(s.FileModes) != 3 {
		t.Errorf("FileModes = %v, want the three files that gave a mode", s.FileModes)
	}
	if s.Files["run.sh"] != "#!/bin/sh\necho hi\n" || s.Files["bin/x"] != "\x00\x01\xff" || s.Files["text.txt"] != "y" {
		t.Errorf("contents: %q", s.Files)
	}
	b, err := s.Encode(0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"run.sh":{"mode":"0755","text":"#!/bin/sh\necho hi\n"}`) ||
		!strings.Contains(string(b), `"bin/x":{"base64":"AAH/","mode":"0700"}`) || !strings.Contains(string(b), `"plain.txt":"x"`) {
		t.Errorf("encoded: %s", b)
	}
	again, err := tasks.Decode(b)
	if err != nil {
		t.Fatalf("decode the encoded spec: %v\n%s", err, b)
	}
	for p, m := range want {
		if again.Mode(p) != m || again.Files[p] != s.Files[p] {
			t.Errorf("round trip of %q: mode %s, content %q", p, again.Mode(p), again.Files[p])
		}
	}
	c := s.Clone()
	c.FileModes["run.sh"] = 0o600
	if s.Mode("run.sh") != 0o755 {
		t.Error("a clone's FileModes is the original's")
	}

	// Without a mode, the encoding is the string form, as before.
	plain, _ := tasks.Decode([]byte(`{"version": 1, "files": {"a": {"text": "x"}}, "steps": [{"run": ["true"]}]}`))
	if b, _ := json.Marshal(plain); !strings.Contains(string(b), `"files":{"a":"x"}`) || plain.FileModes != nil {
		t.Errorf("a file without a mode: %s, modes %v", b, plain.FileModes)
	}
}

// TestFileModeErrors: a bad mode, or a bad object form, is an error that
// names the file's member.
func TestFileModeErrors(t *testing.T) {
	for _, c := range []struct{ file, field, msg string }{
		{`{"text": "x", "mode": "4755"}`, `files["run.sh"].mode`, "setuid, setgid and sticky"},
		{`{"text": "x", "mode": "01755"}`, `files["run.sh"].mode`, "setuid, setgid and sticky"},
		{`{"text": "x", "mode": 755}`, `files["run.sh"].mode`, "octal"},
		{`{"text": "x", "mode": "rwxr-xr-x"}`, `files["run.sh"].mode`, "not a file mode"},
		{`{"text": "x", "mode": "0o755"}`, `files["run.sh"].mode`, "not a file mode"},
		{`{"base64": "AA==", "mode": "0800"}`, `files["run.sh"].mode`, "not a file mode"},
		{`{"text": "x", "mdoe": "0755"}`, `files["run.sh"].mdoe`, "unknown field"},
		{`{"text": 1}`, `files["run.sh"].text`, "want a string"},
		{`{"base64": "!!"}`, `files["run.sh"].base64`, "illegal base64"},
		{`{"text": "x", "base64": "AA=="}`, `files["run.sh"]`, "not both"},
		{`{"mode": "0755"}`, `files["run.sh"]`, `want "text" or "base64"`},
		{`7`, `files["run.sh"]`, "want a string, or an object"},
	} {
		_, err := tasks.Decode([]byte(`{"version": 1, "files": {"run.sh": ` + c.file + `}, "steps": [{"run": ["true"]}]}`))
		var fe *tasks.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Msg, c.msg) {
			t.Errorf("%s: %v, want field %s and %q", c.file, err, c.field, c.msg)
		}
		if fe != nil && strings.HasSuffix(c.field, ".mode") && !strings.Contains(fe.Error(), `"0755"`) {
			t.Errorf("%s: %v: want a hint with an example", c.file, err)
		}
	}

	// Set from Go: Prepare checks what ParseFileMode would have refused.
	for _, c := range []struct {
		modes map[string]tasks.FileMode
		msg   string
	}{
		{map[string]tasks.FileMode{"run.sh": 0o4755}, "above 0777"},
		{map[string]tasks.FileMode{"other.sh": 0o755}, "does not have"},
	} {
		s := &tasks.Spec{Version: 1, Files: map[string]tasks.File{"run.sh": "x"}, FileModes: c.modes, Steps: []tasks.Step{{Run: []string{"true"}}}}
		err := s.Prepare(limits.DefaultPolicy())
		var fe *tasks.FieldError
		if !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, `.sh"].mode`) || !strings.Contains(fe.Msg, c.msg) {
			t.Errorf("%v: %v, want files[...].mode and %q", c.modes, err, c.msg)
		}
	}
}
