package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-run/airlock/approve"
)

// Text output is at most lineWidth columns wide. Everything that comes
// from a run (ids, reasons, results, artifact names and contents) goes
// through clean first: an approver's terminal must show what is there, not
// what escape sequences or bidi controls in it would make it show.
const lineWidth = 80

const (
	resultLines  = 40 // lines of the pretty-printed result show prints
	previewLines = 5  // lines of a text artifact show prints
)

// clean makes s safe to print on one line: control characters, invalid
// UTF-8 and invisible formatting characters (bidi overrides, zero-width
// characters) are escaped as \xNN or \uNNNN; a tab becomes a space.
func clean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteByte(' ')
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// runeWidth is the number of columns r takes: 0 for combining marks, 2 for
// East Asian wide characters and emoji, else 1.
func runeWidth(r rune) int {
	switch {
	case unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r):
		return 0
	case r >= 0x1100 && r <= 0x115f, r >= 0x2e80 && r <= 0xa4cf && r != 0x303f,
		r >= 0xac00 && r <= 0xd7a3, r >= 0xf900 && r <= 0xfaff, r >= 0xfe30 && r <= 0xfe4f,
		r >= 0xff00 && r <= 0xff60, r >= 0xffe0 && r <= 0xffe6,
		r >= 0x1f300 && r <= 0x1f64f, r >= 0x1f900 && r <= 0x1f9ff, r >= 0x20000 && r <= 0x3fffd:
		return 2
	}
	return 1
}

// width is the number of columns s takes.
func width(s string) int {
	w := 0
	for _, r := range s {
		w += runeWidth(r)
	}
	return w
}

// fit returns s cut to w columns, ending in "…" when cut.
func fit(s string, w int) string {
	if width(s) <= w {
		return s
	}
	if w <= 0 {
		return ""
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		rw := runeWidth(r)
		if used+rw > w-1 {
			break
		}
		b.WriteRune(r)
		used += rw
	}
	return b.String() + "…"
}

// pad returns s padded with spaces to w columns.
func pad(s string, w int) string {
	if n := w - width(s); n > 0 {
		return s + strings.Repeat(" ", n)
	}
	return s
}

// wrap splits text into lines of at most w columns, at spaces when it can.
func wrap(text string, w int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		for width(word) > w { // a word longer than a line: cut it
			if line != "" {
				lines, line = append(lines, line), ""
			}
			cut, used := 0, 0
			for i, r := range word {
				if used+runeWidth(r) > w {
					cut = i
					break
				}
				used += runeWidth(r)
			}
			lines, word = append(lines, word[:cut]), word[cut:]
		}
		switch {
		case line == "":
			line = word
		case width(line)+1+width(word) <= w:
			line += " " + word
		default:
			lines, line = append(lines, line), word
		}
	}
	if line != "" || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// age is how long ago t was: 45s, 12m, 3h, 5d.
func age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// in is how far in the future t is, like age.
func in(now, t time.Time) string { return age(t, now) }

// size is n bytes for humans: 512 B, 1.2 KiB, 3.0 MiB.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 3 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGT"[i])
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// formatList is the list table.
func formatList(as []*approve.Approval, state approve.State, now time.Time) string {
	if len(as) == 0 {
		if state == "" {
			state = approve.StatePending
		}
		if state == approve.StateAll {
			return "no approvals\n"
		}
		return "no " + string(state) + " approvals\n"
	}
	type row struct{ id, age, run, reasons string }
	rows := make([]row, len(as))
	idW, ageW, runW := len("ID"), len("AGE"), len("RUN")
	for i, a := range as {
		run := a.RunID
		if run == "" {
			run = a.TaskID
		}
		r := row{clean(a.ID), age(now, a.CreatedAt), clean(run), clean(strings.Join(a.Reasons, "; "))}
		if state != approve.StatePending && state != "" {
			r.reasons = stateNote(a, now) + r.reasons
		}
		rows[i] = r
		idW, ageW, runW = max(idW, width(r.id)), max(ageW, width(r.age)), max(runW, width(r.run))
	}
	runW = min(runW, 24)
	reasonsW := lineWidth - idW - ageW - runW - 6
	var b strings.Builder
	line := func(id, age, run, reasons string) {
		l := pad(id, idW) + "  " + pad(age, ageW) + "  " + pad(fit(run, runW), runW) + "  " + fit(reasons, max(reasonsW, 0))
		b.WriteString(fit(strings.TrimRight(l, " "), lineWidth) + "\n")
	}
	line("ID", "AGE", "RUN", "REASONS")
	for _, r := range rows {
		line(r.id, r.age, r.run, r.reasons)
	}
	return b.String()
}

// stateNote is the decision of a, before its reasons in a list of decided
// approvals: "[accepted by alice] ".
func stateNote(a *approve.Approval, now time.Time) string {
	s := string(a.State)
	if a.State == approve.StatePending && !a.ExpiresAt.IsZero() && !now.Before(a.ExpiresAt) {
		s += ", past its expiry"
	}
	if a.DecidedBy != "" {
		s += " by " + clean(a.DecidedBy)
	}
	if a.State == approve.StateAccepted && !a.PromotedAt.IsZero() {
		s += ", promoted"
	}
	return "[" + s + "] "
}

// formatWatch is the line watch prints for a new pending approval.
func formatWatch(a *approve.Approval) string {
	run := a.RunID
	if run == "" {
		run = a.TaskID
	}
	l := stamp(a.CreatedAt) + "  " + clean(a.ID) + "  " + fit(clean(run), 24) + "  " + clean(strings.Join(a.Reasons, "; "))
	return fit(l, lineWidth)
}

// formatHistory is the audit trail, one event per line (a long comment
// continues on the next lines).
func formatHistory(h []approve.Event) string {
	var b strings.Builder
	for _, e := range h {
		from := string(e.From)
		if from == "" {
			from = "(new)"
		}
		l := stamp(e.At) + "  " + from + " → " + string(e.To)
		if e.By != "" {
			l += "  by " + clean(e.By)
		}
		if e.Comment != "" {
			c := clean(e.Comment)
			if width(l)+2+width(strconv.Quote(c)) <= lineWidth {
				l += "  " + strconv.Quote(c)
			} else {
				b.WriteString(l + "\n")
				for _, cl := range wrap(c, lineWidth-4) {
					b.WriteString("    " + cl + "\n")
				}
				continue
			}
		}
		b.WriteString(fit(l, lineWidth) + "\n")
	}
	return b.String()
}

// formatShow is the text of show. data returns an artifact's staged bytes.
func formatShow(a *approve.Approval, data func(name string) ([]byte, error), now time.Time) (string, error) {
	var b strings.Builder
	field := func(name, value string) {
		b.WriteString(fit(fmt.Sprintf("%-10s %s", name, value), lineWidth) + "\n")
	}
	field("approval", clean(a.ID))
	field("created", stamp(a.CreatedAt)+" ("+age(now, a.CreatedAt)+" ago)")
	state := string(a.State)
	switch {
	case a.State == approve.StatePending && !a.ExpiresAt.IsZero() && !now.Before(a.ExpiresAt):
		state += ", past its expiry (" + stamp(a.ExpiresAt) + ")"
	case a.State == approve.StatePending && !a.ExpiresAt.IsZero():
		state += ", expires in " + in(now, a.ExpiresAt) + " (" + stamp(a.ExpiresAt) + ")"
	case a.State == approve.StateExpired:
		state += " at " + stamp(a.DecidedAt)
	case a.DecidedBy != "":
		state += " by " + clean(a.DecidedBy) + " at " + stamp(a.DecidedAt)
	}
	field("state", state)
	if a.ByNote != "" {
		// The name the decider's front end was given: a note, not who decided.
		field("by note", clean(a.ByNote))
	}
	if a.Comment != "" {
		for i, l := range wrap(clean(a.Comment), lineWidth-11) {
			field(first(i == 0, "comment"), l)
		}
	}
	if !a.PromotedAt.IsZero() {
		field("promoted", stamp(a.PromotedAt))
	}
	field("run", clean(a.RunID))
	field("task", clean(a.TaskID))
	if a.Run.Principal != "" {
		field("asked by", clean(a.Run.Principal))
	}
	r := a.Run
	run := []string{clean(r.Queue)}
	if r.Attempt > 0 {
		run = append(run, "attempt "+strconv.Itoa(r.Attempt))
	}
	if r.StepsMS > 0 {
		run = append(run, "steps "+duration(r.StepsMS))
	}
	if r.Worker != "" {
		run = append(run, "worker "+clean(r.Worker))
	}
	if r.Network {
		run = append(run, "network")
	}
	field("queue", strings.Join(run, ", "))
	if len(a.Reasons) == 0 {
		field("reasons", "(none)")
	}
	for i, reason := range a.Reasons {
		for j, l := range wrap(clean(reason), lineWidth-13) {
			prefix := "  "
			if j == 0 {
				prefix = "- "
			}
			field(first(i == 0 && j == 0, "reasons"), prefix+l)
		}
	}

	b.WriteString("\nsteps\n")
	if len(r.Steps) == 0 {
		b.WriteString("  (none)\n")
	}
	nameW, verdictW := 4, 7
	for _, s := range r.Steps {
		nameW, verdictW = max(nameW, width(clean(s.Name))), max(verdictW, width(clean(string(s.Verdict))))
	}
	nameW = min(nameW, 20)
	for _, s := range r.Steps {
		end := "-"
		switch {
		case s.Signal != "":
			end = clean(s.Signal)
		case s.ExitCode != nil:
			end = "exit " + strconv.Itoa(*s.ExitCode)
		}
		l := "  " + pad(fit(clean(s.Name), nameW), nameW) + "  " + pad(clean(string(s.Verdict)), verdictW) + "  " +
			pad(end, 8) + "  " + pad(fmt.Sprintf("cpu %s", duration(s.CPUMS)), 12) + "  " + clean(shellJoin(s.Argv))
		b.WriteString(fit(strings.TrimRight(l, " "), lineWidth) + "\n")
	}

	b.WriteString("\nresult\n")
	writeResult(&b, a.Result)

	b.WriteString("\nartifacts\n")
	if len(a.Artifacts) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, art := range a.Artifacts {
		sha := art.SHA256
		if len(sha) > 12 {
			sha = sha[:12]
		}
		tail := "  " + size(art.Bytes) + "  sha256 " + clean(sha) + "  " + clean(art.ContentType)
		name := fit(clean(art.Name), max(lineWidth-2-width(tail), 20))
		b.WriteString(fit(strings.TrimRight("  "+name+tail, " "), lineWidth) + "\n")
		if !isText(art.ContentType) {
			continue
		}
		content, err := data(art.Name)
		if errors.Is(err, approve.ErrNotFound) {
			b.WriteString("    (staged bytes dropped)\n")
			continue
		}
		if err != nil {
			return "", err
		}
		writePreview(&b, content)
	}
	return b.String(), nil
}

// shellJoin joins argv as a shell would need it typed.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, arg := range argv {
		q[i] = arg
		if arg == "" || strings.IndexFunc(arg, func(r rune) bool {
			return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_./=:,+@%^-", r)))
		}) >= 0 {
			q[i] = "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// first is label on the first line of a field (isFirst), else "".
func first(isFirst bool, label string) string {
	if isFirst {
		return label
	}
	return ""
}

// duration formats milliseconds: 850ms, 2.2s, 3m4s.
func duration(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// isText reports whether an artifact of content type ct is shown as text.
func isText(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(ct))
	}
	return strings.HasPrefix(mt, "text/") || mt == "application/json"
}

// lines splits text into lines, without the line ends, tabs expanded to 4
// columns.
func lines(text string) []string {
	text = strings.TrimSuffix(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	ls := strings.Split(text, "\n")
	for i, l := range ls {
		ls[i] = expandTabs(l)
	}
	return ls
}

func expandTabs(s string) string {
	if !strings.Contains(s, "\t") {
		return s
	}
	var b strings.Builder
	col := 0
	for _, r := range s {
		if r == '\t' {
			n := 4 - col%4
			b.WriteString(strings.Repeat(" ", n))
			col += n
			continue
		}
		b.WriteRune(r)
		col++
	}
	return b.String()
}

// writeResult writes the run's JSON result pretty-printed (indent 2),
// capped at resultLines lines.
func writeResult(b *strings.Builder, result []byte) {
	if len(bytes.TrimSpace(result)) == 0 {
		b.WriteString("  (none)\n")
		return
	}
	var out bytes.Buffer
	text := string(result)
	if err := json.Indent(&out, result, "", "  "); err == nil {
		text = out.String()
	} else {
		b.WriteString("  (not JSON)\n")
	}
	ls := lines(text)
	for i, l := range ls {
		if i == resultLines {
			fmt.Fprintf(b, "  … %d more lines (approve show -json ID prints all)\n", len(ls)-i)
			break
		}
		b.WriteString(fit("  "+clean(l), lineWidth) + "\n")
	}
}

// writePreview writes the first previewLines lines of a text artifact.
func writePreview(b *strings.Builder, content []byte) {
	if len(content) == 0 {
		b.WriteString("    (empty)\n")
		return
	}
	if !utf8.Valid(content) || bytes.IndexByte(content, 0) >= 0 {
		b.WriteString("    (not UTF-8 text)\n")
		return
	}
	ls := lines(string(content))
	for i, l := range ls {
		if i == previewLines {
			fmt.Fprintf(b, "    … %d more lines\n", len(ls)-i)
			break
		}
		b.WriteString(strings.TrimRight(fit("    | "+clean(l), lineWidth), " ") + "\n")
	}
}
