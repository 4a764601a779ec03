package airlock_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The README is the front door and the reference lives under docs/: these
// tests keep every link between the documents, and every citation of a
// document in the code (help texts, package docs, the OpenAPI document),
// pointing at a file and a heading that exist, and the front door short.

// maxDocBytes bounds what a test reads of one file.
const maxDocBytes = 4 << 20

// readBounded reads a file of the repository, at most maxDocBytes.
func readBounded(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDocBytes+1))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxDocBytes {
		t.Fatalf("%s: over %d bytes", path, maxDocBytes)
	}
	return string(b)
}

// markdownFiles are the documents whose links are checked.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md", "RELIABILITY.md", "CHANGELOG.md"}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("docs/: no page found")
	}
	return append(files, docs...)
}

// withoutCode blanks fenced code blocks and inline code spans (keeping line
// breaks and offsets), so that what looks like a link or a heading in code is
// not taken for one.
func withoutCode(s string) string {
	lines := strings.Split(s, "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "```") {
			fence = !fence
			lines[i] = ""
			continue
		}
		if fence {
			lines[i] = ""
		}
	}
	b := []byte(strings.Join(lines, "\n"))
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		closing := strings.Repeat("`", n)
		end := strings.Index(string(b[i+n:]), closing)
		if end < 0 {
			i += n
			continue
		}
		for j := i; j < i+n+end+n; j++ {
			if b[j] != '\n' && b[j] != '[' && b[j] != ']' {
				b[j] = ' '
			}
		}
		i += n + end + n
	}
	return string(b)
}

var (
	headingRe = regexp.MustCompile(`^(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	linkRe    = regexp.MustCompile(`\[[^\]]*\]\(([^()\s]+)\)`)
	mdLinkRe  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading: lower case, markup and punctuation
// dropped (letters, digits, marks, '_' and '-' kept), spaces made hyphens.
func slug(heading string) string {
	heading = mdLinkRe.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the heading anchors of a markdown document, duplicates
// numbered as GitHub numbers them (x, x-1, x-2).
func anchors(doc string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64<<10), maxDocBytes)
	fence := false
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimLeft(l, " "), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		m := headingRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(strings.ReplaceAll(m[2], "`", ""))
		a := s
		if n := seen[s]; n > 0 {
			a = fmt.Sprintf("%s-%d", s, n)
		}
		seen[s]++
		out[a] = true
	}
	return out
}

// checkTarget reports what is wrong with a link to target (a path relative to
// dir, with an optional #anchor), or "".
func checkTarget(t *testing.T, dir, self, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	file := self
	if path != "" {
		file = filepath.Clean(filepath.Join(dir, path))
		if _, err := os.Stat(file); err != nil {
			return fmt.Sprintf("%s: no such file or directory", file)
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".md") {
		return fmt.Sprintf("%s: an anchor into a file that is not markdown", file)
	}
	if !anchors(readBounded(t, file))[anchor] {
		return fmt.Sprintf("%s has no heading whose anchor is #%s", file, anchor)
	}
	return ""
}

// TestLinkCheckerCatchesBrokenLinks: the checker itself knows GitHub's
// anchors and reports a missing file or heading.
func TestLinkCheckerCatchesBrokenLinks(t *testing.T) {
	for heading, want := range map[string]string{
		"Risk policy (`worker -policy FILE`, JSON or YAML)": "risk-policy-worker--policy-file-json-or-yaml",
		"Today's table: the hot path (2026-12-04)":          "todays-table-the-hot-path-2026-12-04",
		"Egress (`network: true`)":                          "egress-network-true",
		"Idle latency: what would reach p50 ≤ 10 ms":        "idle-latency-what-would-reach-p50--10-ms",
		"See [Redis](redis.md) and snake_case":              "see-redis-and-snake_case",
	} {
		if got := slug(strings.ReplaceAll(heading, "`", "")); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	if a := anchors("# A\n## A\n```\n# Not a heading\n```\n"); !a["a"] || !a["a-1"] || a["not-a-heading"] {
		t.Errorf("anchors: %v, want a and a-1 and nothing from a code block", a)
	}
	if got := withoutCode("`[x](nowhere.md)` and [y](README.md)"); len(linkRe.FindAllString(got, -1)) != 1 {
		t.Errorf("withoutCode kept %q: want only the link outside the code span", linkRe.FindAllString(got, -1))
	}
	for target, broken := range map[string]bool{
		"docs/spec.md#limits":             false,
		"docs/spec.md#no-such-heading":    true,
		"docs/no-such-page.md":            true,
		"#who-may-ask-for-what":           false,
		"#how-a-task-runs-in-three-lines": true,
		"internal/isolation/sandbox":      false,
	} {
		if got := checkTarget(t, ".", "README.md", target) != ""; got != broken {
			t.Errorf("checkTarget(%q) reports a problem: %v, want %v", target, got, broken)
		}
	}
}

// TestDocumentLinks: every relative link of the README, BENCHMARKS.md,
// RELIABILITY.md, CHANGELOG.md and docs/*.md names a file that exists and,
// with an #anchor, a heading of that file.
func TestDocumentLinks(t *testing.T) {
	checked := 0
	for _, f := range markdownFiles(t) {
		text := withoutCode(readBounded(t, f))
		for _, m := range linkRe.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			line := 1 + strings.Count(text[:m[0]], "\n")
			if problem := checkTarget(t, filepath.Dir(f), f, target); problem != "" {
				t.Errorf("%s:%d: link (%s): %s", f, line, target, problem)
			}
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("only %d links checked: is the link pattern still right?", checked)
	}
}

// citationRe is a document cited by path in code: a help text, a package
// doc, a description of the OpenAPI document.
var citationRe = regexp.MustCompile(`\b((?:docs/[a-z0-9-]+|README|BENCHMARKS|RELIABILITY|CHANGELOG)\.md)(#[a-z0-9_-]+)?`)

// TestCodeCitesDocumentsThatExist: a document the code cites by path
// (docs/spec.md#limits in a flag's help, say) exists, and so does the heading
// its anchor names; and nothing cites the README's sections that moved to
// docs/ ("README, Redis").
func TestCodeCitesDocumentsThatExist(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Hidden directories (.git) but .ci, test data, and what a dev
			// worker leaves in the tree (its store of published outputs).
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") && name != ".ci" || name == "testdata" || name == "node_modules" || name == "airlock-store") {
				return filepath.SkipDir
			}
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > maxDocBytes {
			return err // a file this large is data, not code that cites a document
		}
		switch filepath.Ext(path) {
		case ".go", ".json", ".py", ".mjs", ".yaml", ".yml":
			files = append(files, path)
		}
		if d.Name() == "Dockerfile" || path == filepath.Join(".ci", "run") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	moved := regexp.MustCompile(`README[,:] "?(Task spec|The run record|Redis|Promotion|HTTP API|Events|Isolation|Deployment|Webhooks|MCP|CLIs|Limits|Managed Redis|Crashes)`)
	cited := 0
	for _, f := range files {
		if f == "docs_test.go" {
			continue
		}
		text := readBounded(t, f)
		for _, m := range citationRe.FindAllStringSubmatch(text, -1) {
			if problem := checkTarget(t, ".", f, m[1]+m[2]); problem != "" {
				t.Errorf("%s cites %s%s: %s", f, m[1], m[2], problem)
			}
			cited++
		}
		for _, m := range moved.FindAllString(text, -1) {
			t.Errorf("%s cites %q: that section moved to docs/", f, m)
		}
	}
	if cited == 0 {
		t.Fatal("no citation of a document found in the code: is the pattern still right?")
	}
}

// TestREADMEIsTheFrontDoor: the README stays short and links every page of
// docs/; BENCHMARKS.md keeps only today's table and how to reproduce it.
func TestREADMEIsTheFrontDoor(t *testing.T) {
	readme := readBounded(t, "README.md")
	if n := strings.Count(readme, "\n"); n > 400 {
		t.Errorf("README.md: %d lines, at most 400: move reference sections to docs/", n)
	}
	if n := strings.Count(readBounded(t, "BENCHMARKS.md"), "\n"); n > 300 {
		t.Errorf("BENCHMARKS.md: %d lines, at most 300: move dated sections to docs/benchmarks-history.md", n)
	}
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if !strings.Contains(readme, "]("+filepath.ToSlash(d)+")") {
			t.Errorf("README.md does not link %s", d)
		}
	}
}
