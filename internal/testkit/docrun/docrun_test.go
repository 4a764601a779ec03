//go:build unix

package docrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const page = "# A page\n" +
	"```sh\n" +
	"X=$(echo hi)            # keeps X for the next command\n" +
	"\n" +
	"# a comment line\n" +
	"echo \"$X # not a comment\" # → hi # not\n" +
	"sh -c 'exit 3'          # exit 3: as the page says\n" +
	"printf '%s\\n' a \\\n" +
	"  b                     # → b\n" +
	"```\n" +
	"```console\n" +
	"$ not run\n" +
	"```\n" +
	"<!-- docs-test: background until \"ready\" -->\n" +
	"```sh\n" +
	"sleep 0.3; echo ready; sleep 30\n" +
	"```\n" +
	"<!-- docs-test: fresh; root -->\n" +
	"```sh\n" +
	"true\n" +
	"```\n" +
	"<!-- docs-test: skip: the test command itself; .ci/run runs it -->\n" +
	"```sh\n" +
	"go test ./...\n" +
	"```\n"

func TestParse(t *testing.T) {
	got, err := Parse("p.md", page)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Page: "p.md", Line: 2, Commands: []Command{
			{Line: 3, Text: "X=$(echo hi)            # keeps X for the next command"},
			{Line: 6, Text: "echo \"$X # not a comment\" # → hi # not", Want: "hi # not"},
			{Line: 7, Text: "sh -c 'exit 3'          # exit 3: as the page says", Exit: 3},
			{Line: 8, Text: "printf '%s\\n' a \\\n  b                     # → b", Want: "b"},
		}},
		{Page: "p.md", Line: 15, Background: "ready", Commands: []Command{{Line: 16, Text: "sleep 0.3; echo ready; sleep 30"}}},
		{Page: "p.md", Line: 19, Fresh: true, Root: true, Commands: []Command{{Line: 20, Text: "true"}}},
		{Page: "p.md", Line: 23, Skip: "the test command itself; .ci/run runs it", Commands: []Command{{Line: 24, Text: "go test ./..."}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if segs := Segments(got); len(segs) != 2 || len(segs[0]) != 2 || len(segs[1]) != 1 {
		t.Errorf("segments: %+v", segs)
	}
}

func TestParseErrors(t *testing.T) {
	for name, md := range map[string]string{
		"unknown directive":    "<!-- docs-test: backgroud -->\n```sh\ntrue\n```\n",
		"skip without why":     "<!-- docs-test: skip: -->\n```sh\ntrue\n```\n",
		"directive, no fence":  "<!-- docs-test: fresh -->\n\ntext\n",
		"directive on console": "<!-- docs-test: fresh -->\n```console\n$ true\n```\n",
		"open quote":           "```sh\necho 'a\nb'\n```\n",
		"empty block":          "```sh\n# nothing\n```\n",
		"fence never closes":   "```sh\ntrue\n",
		"arrow with no text":   "```sh\ntrue # →\n```\n",
		"a transcript":         "```sh\n$ true\n```\n",
	} {
		if _, err := Parse("p.md", md); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestScript runs a segment's script with bash: the commands pass their
// checks, and a command that breaks one is named with the check.
func TestScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	blocks, err := Parse("p.md", page)
	if err != nil {
		t.Fatal(err)
	}
	run := func(seg []Block) (string, error) {
		dir := t.TempDir()
		cmd := exec.Command("bash", "-c", Script(seg), "script", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// What the script left in the background goes with it.
		defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
		out, err := cmd.CombinedOutput()
		failed, _ := os.ReadFile(filepath.Join(dir, "failed"))
		if len(out) > 0 {
			t.Logf("bash said: %s", out)
		}
		return strings.TrimSpace(string(failed)), err
	}
	segs := Segments(blocks)
	if failed, err := run(segs[0]); err != nil || failed != "" {
		t.Fatalf("the page's first segment: %v, failed %q", err, failed)
	}
	for _, c := range []struct {
		cmd  string
		fail string
	}{
		{"false", "1 exit 1"},
		{"true # exit 2", "1 exit 0"},
		{"echo there # → elsewhere", "1 want"},
	} {
		bl, err := Parse("p.md", "```sh\n"+c.cmd+"\n```\n")
		if err != nil {
			t.Fatal(err)
		}
		if failed, err := run(bl); err == nil || failed != c.fail {
			t.Errorf("%q: %v, failed %q; want %q", c.cmd, err, failed, c.fail)
		}
	}
	bl, _ := Parse("p.md", "<!-- docs-test: background until '\"never\"' -->\n```sh\necho other\n```\n")
	if bl[0].Background != `"never"` {
		t.Errorf("background until '\"never\"': %q", bl[0].Background)
	}
	if failed, err := run(bl); err == nil || failed != "1 background 1" {
		t.Errorf("a background block that ends without its text: %v, failed %q", err, failed)
	}
	if b, c := Ref(segs[0], 5); b == nil || b.Line != 15 || c.Line != 16 {
		t.Errorf("Ref(5) = %+v, %+v; want the background block", b, c)
	}
}
