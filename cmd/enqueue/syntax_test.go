package main

import (
	"strings"
	"testing"
)

// TestSyntaxErrorPosition: a spec that is not JSON is refused (exit 2)
// with the line and column of what is wrong, from a file and from stdin.
func TestSyntaxErrorPosition(t *testing.T) {
	t.Parallel()
	spec := "{\n  \"version\": 1,\n  \"steps\": [{\"run\": [\"true\"]},]\n}\n"
	for _, path := range []string{"", "-"} {
		got := enqueueCmd(t, spec, path)
		if got.Code != 2 || !strings.Contains(got.Stderr, "spec: line 3, column 31: invalid character ']' looking for beginning of value") {
			t.Errorf("path %q: exit %d, stderr %q: want 2 and the line and column of the stray ']'", path, got.Code, got.Stderr)
		}
	}
}
