// Package docrun reads the shell blocks of the project's markdown pages
// that a reader is meant to type, and turns them into bash scripts that
// run every command as written and check it: its exit status and what the
// page promises it prints. The e2e test TestDocsCommands runs them against
// the real binaries, on the dev setup each page describes.
//
// A block a reader types is fenced ```sh; other fences (```console for a
// transcript or a production host's command, ``` for usage and output)
// are not run. In a block, each line is one command (a line ending with a
// backslash continues on the next); a command's trailing comment may
// promise:
//
//	bin/enqueue -result "$T"    # exit 3: parked, not promoted
//	bin/approve list            # → ap-
//
// "exit N" is the status the command must end with (0 without it); "→ TEXT"
// a text its output (stdout and stderr) must hold.
//
// What a reader does between blocks that the commands cannot say goes in
// an HTML comment on the line just above the fence, invisible on the
// rendered page:
//
//	<!-- docs-test: background until "TEXT" -->  the block runs in the background (another
//	                                             terminal); the next block waits until its
//	                                             output holds TEXT (or 'TEXT', which may
//	                                             hold a double quote)
//	<!-- docs-test: fresh -->                    a new terminal: what earlier blocks left
//	                                             running is stopped first (the page says so)
//	<!-- docs-test: root -->                     the block needs root (the page says so); as
//	                                             another user the page's run stops here
//	<!-- docs-test: skip: WHY -->                not run; WHY names what runs it instead
//
// Directives combine with ';' ("fresh; root"); skip comes last, its
// reason is the rest of the comment.
package docrun

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Command is one command of a block.
type Command struct {
	Line int    // of its first line in the page, from 1
	Text string // as written, continuation lines joined by "\\\n"
	Exit int    // the status it must end with
	Want string // a text its output must hold ("": none)
}

// Block is one ```sh block of a page.
type Block struct {
	Page       string
	Line       int // of its opening fence
	Commands   []Command
	Background string // the text the block's output must reach before the page goes on ("": runs in the foreground)
	Fresh      bool
	Root       bool
	Skip       string // why it is not run ("": it is)
}

// Where is the block's page and line, for messages.
func (b *Block) Where() string { return fmt.Sprintf("%s:%d", b.Page, b.Line) }

var (
	directiveRe = regexp.MustCompile(`^<!--\s*docs-test:\s*(.*?)\s*-->\s*$`)
	untilRe     = regexp.MustCompile(`^background until (?:"([^"]+)"|'([^']+)')$`)
	exitRe      = regexp.MustCompile(`^exit (\d+)\b`)
)

// Parse reads the ```sh blocks of page (its name in messages) and their
// directives. A directive that is not one of the package's, one that is
// not above a ```sh fence, or a skip without a reason is an error: a
// typo must not turn a check off.
func Parse(page, md string) ([]Block, error) {
	lines := strings.Split(md, "\n")
	var blocks []Block
	var pending *Block // directives waiting for their fence
	pendingLine := 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := directiveRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			b := &Block{Page: page}
			if err := b.directives(m[1]); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", page, i+1, err)
			}
			pending, pendingLine = b, i+1
			continue
		}
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "```") {
			if pending != nil && trimmed != "" {
				return nil, fmt.Errorf("%s:%d: a docs-test directive must be the line just above a ```sh fence", page, pendingLine)
			}
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: a fence that never closes", page, i+1)
		}
		if lang != "sh" {
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: a docs-test directive above a ```%s fence: only ```sh blocks run", page, pendingLine, lang)
			}
			i = end
			continue
		}
		b := Block{Page: page, Line: i + 1}
		if pending != nil {
			b = *pending
			b.Page, b.Line = page, i+1
			pending = nil
		}
		cmds, err := commands(lines[i+1:end], i+2)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", page, err)
		}
		if len(cmds) == 0 {
			return nil, fmt.Errorf("%s:%d: a ```sh block without a command", page, i+1)
		}
		b.Commands = cmds
		blocks = append(blocks, b)
		i = end
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: a docs-test directive with no fence after it", page, pendingLine)
	}
	return blocks, nil
}

// directives reads a docs-test comment's directives into b.
func (b *Block) directives(s string) error {
	// A skip's reason is the rest of the comment, ';' included.
	if before, why, ok := strings.Cut(s, "skip:"); ok {
		if b.Skip = strings.TrimSpace(why); len(b.Skip) < 10 {
			return fmt.Errorf("docs-test skip: say why, and what runs it instead")
		}
		s = strings.TrimSuffix(strings.TrimSpace(before), ";")
		if s == "" {
			return nil
		}
	}
	for _, d := range strings.Split(s, ";") {
		d = strings.TrimSpace(d)
		switch {
		case d == "fresh":
			b.Fresh = true
		case d == "root":
			b.Root = true
		case untilRe.MatchString(d):
			m := untilRe.FindStringSubmatch(d)
			b.Background = m[1] + m[2]
		default:
			return fmt.Errorf("docs-test: unknown directive %q (background until \"TEXT\" or 'TEXT', fresh, root, skip: WHY)", d)
		}
	}
	return nil
}

// commands splits a block's lines into commands, reading each one's
// promises from its trailing comment. first is the page line of lines[0].
func commands(lines []string, first int) ([]Command, error) {
	var out []Command
	for i := 0; i < len(lines); i++ {
		start := i
		text := lines[i]
		for strings.HasSuffix(text, "\\") && i+1 < len(lines) {
			i++
			text += "\n" + lines[i]
		}
		if strings.HasSuffix(text, "\\") {
			return nil, fmt.Errorf("line %d: a continuation with no next line", first+i)
		}
		code, comment, err := splitComment(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", first+start, err)
		}
		if strings.TrimSpace(code) == "" {
			continue // a blank or comment-only line
		}
		if strings.HasPrefix(strings.TrimSpace(code), "$ ") {
			return nil, fmt.Errorf("line %d: a prompt ($): a transcript of commands and their output is fenced ```console, not ```sh", first+start)
		}
		c := Command{Line: first + start, Text: text}
		if m := exitRe.FindStringSubmatch(comment); m != nil {
			c.Exit, _ = strconv.Atoi(m[1])
		}
		if _, want, ok := strings.Cut(comment, "→"); ok {
			if c.Want = strings.TrimSpace(want); c.Want == "" {
				return nil, fmt.Errorf("line %d: \"→\" with no text after it", first+start)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// splitComment splits a command at its trailing comment: a '#' outside
// quotes that starts a word. It returns the comment's text without the
// '#' and the spaces around it.
func splitComment(s string) (code, comment string, err error) {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '\\':
			i++
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t' || s[i-1] == '\n'):
			return s[:i], strings.TrimSpace(s[i+1:]), nil
		}
	}
	if quote != 0 {
		return "", "", fmt.Errorf("a quote (%c) that never closes: write each command on one line, or continue it with a backslash", quote)
	}
	return s, "", nil
}

// Segments splits a page's blocks where a reader starts afresh: at each
// fresh block. Skipped blocks are left out.
func Segments(blocks []Block) [][]Block {
	var out [][]Block
	var cur []Block
	for _, b := range blocks {
		if b.Skip != "" {
			continue
		}
		if b.Fresh && len(cur) > 0 {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, b)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// scriptHead defines what the commands' checks call. $1 is the directory
// of the run's files: N.out (command N's output), N.rc (its status) and
// failed (which check failed, and how).
const scriptHead = `# Generated by docrun from the page's sh blocks: each command as written, then its checks.
set -o pipefail
__d="$1"
__fail() { printf '%s\n' "$*" >"$__d/failed"; exit 1; }
__waitfor() { # FILE PID TEXT SECONDS: 0 once FILE holds TEXT, 1 if PID ended first, 2 past SECONDS
  local i=0
  until grep -qF -- "$3" "$1" 2>/dev/null; do
    kill -0 "$2" 2>/dev/null || { grep -qF -- "$3" "$1" 2>/dev/null && return 0; return 1; }
    [ "$i" -ge $(( $4 * 5 )) ] && return 2
    sleep 0.2; i=$((i + 1))
  done
}
`

// BackgroundWait bounds how long a background block may take to print
// what the page waits for (a cold go run compiles the module first).
const BackgroundWait = 900 // seconds

// Script is the bash script of one segment: commands numbered from 1 in
// order, across its blocks (Ref maps a number back to its command).
func Script(seg []Block) string {
	var b strings.Builder
	b.WriteString(scriptHead)
	n := 0
	for _, bl := range seg {
		fmt.Fprintf(&b, "\n# %s\n", bl.Where())
		if bl.Background != "" {
			n++
			b.WriteString("{ ")
			for _, c := range bl.Commands {
				b.WriteString(c.Text + "\n")
			}
			fmt.Fprintf(&b, "} >\"$__d/%d.out\" 2>&1 </dev/null &\n", n)
			fmt.Fprintf(&b, "__waitfor \"$__d/%d.out\" $! %s %d; __rc=$?; echo \"$__rc\" >\"$__d/%d.rc\"\n", n, quote(bl.Background), BackgroundWait, n)
			fmt.Fprintf(&b, "[ \"$__rc\" = 0 ] || __fail %d background \"$__rc\"\n", n)
			continue
		}
		for _, c := range bl.Commands {
			n++
			fmt.Fprintf(&b, "{ %s\n} >\"$__d/%d.out\" 2>&1 </dev/null\n", c.Text, n)
			fmt.Fprintf(&b, "__rc=$?; echo \"$__rc\" >\"$__d/%d.rc\"\n", n)
			fmt.Fprintf(&b, "[ \"$__rc\" = %d ] || __fail %d exit \"$__rc\"\n", c.Exit, n)
			if c.Want != "" {
				fmt.Fprintf(&b, "grep -qF -- %s \"$__d/%d.out\" || __fail %d want\n", quote(c.Want), n, n)
			}
		}
	}
	return b.String()
}

// Ref is what command n (from 1) of a segment's script is: its block and
// the command, or for a background block its first command.
func Ref(seg []Block, n int) (*Block, *Command) {
	for i := range seg {
		bl := &seg[i]
		if bl.Background != "" {
			if n--; n == 0 {
				return bl, &bl.Commands[0]
			}
			continue
		}
		if n <= len(bl.Commands) {
			return bl, &bl.Commands[n-1]
		}
		n -= len(bl.Commands)
	}
	return nil, nil
}

// quote is s as one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
