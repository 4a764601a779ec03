package webhook

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Slack's Block Kit limits (characters) the bodies stay under.
const (
	slackHeaderMax  = 150
	slackSectionMax = 3000
	slackFieldMax   = 2000
	slackReasons    = 10  // listed; the rest are counted
	slackReasonMax  = 300 // per reason
)

// SlackMessage is the body of a FormatSlack delivery: a Slack incoming
// webhook message. Text is the notification's fallback; Blocks the
// message.
type SlackMessage struct {
	Text   string       `json:"text"`
	Blocks []SlackBlock `json:"blocks"`
}

// SlackBlock is one Block Kit block: header, section (Text and/or
// Fields) or context (Elements).
type SlackBlock struct {
	Type     string      `json:"type"`
	Text     *SlackText  `json:"text,omitempty"`
	Fields   []SlackText `json:"fields,omitempty"`
	Elements []SlackText `json:"elements,omitempty"`
}

// SlackText is a Block Kit text object: plain_text or mrkdwn.
type SlackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// slackEscape cuts s to n characters, then escapes what Slack reads as
// markup (&, <, >): a reason quoting a result cannot mention a channel or
// hide a link.
func slackEscape(s string, n int) string {
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func mrkdwn(s string) SlackText { return SlackText{Type: "mrkdwn", Text: s} }

// field is a section field "*label*\nvalue", value escaped.
func field(label, value string) SlackText {
	return mrkdwn("*" + label + "*\n" + slackEscape(value, slackFieldMax-len(label)-10))
}

// section is a section block of mrkdwn text s, cut to Slack's limit (s is
// escaped already).
func section(s string) SlackBlock {
	if utf8.RuneCountInString(s) > slackSectionMax {
		s = string([]rune(s)[:slackSectionMax-1]) + "…"
	}
	t := mrkdwn(s)
	return SlackBlock{Type: "section", Text: &t}
}

func header(s string) SlackBlock {
	return SlackBlock{Type: "header", Text: &SlackText{Type: "plain_text", Text: cutRunes(s, slackHeaderMax)}}
}

func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// slackPending is the Slack message of a pending approval: title, run,
// reasons and the approve commands.
func slackPending(p Pending) ([]byte, error) {
	var reasons strings.Builder
	for i, r := range p.Reasons {
		if i == slackReasons {
			fmt.Fprintf(&reasons, "… and %d more (%s)\n", len(p.Reasons)-i, slackEscape(p.Commands.Show, 200))
			break
		}
		reasons.WriteString("• " + slackEscape(r, slackReasonMax) + "\n")
	}
	if len(p.Reasons) == 0 {
		reasons.WriteString("(none given)\n")
	}
	fields := []SlackText{field("Run", p.RunID), field("Task", p.TaskID), field("Approval", p.ApprovalID)}
	if p.Queue != "" {
		fields = append(fields, field("Queue", p.Queue))
	}
	if !p.ExpiresAt.IsZero() {
		fields = append(fields, field("Expires", p.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	fields = append(fields, field("Output", fmt.Sprintf("result: %d bytes; artifacts: %d", p.Result.Bytes, len(p.Result.Artifacts))))
	msg := SlackMessage{
		Text: slackEscape(fmt.Sprintf("Airlock: approval pending for run %s (task %s): %s", p.RunID, p.TaskID, p.Commands.Accept), slackSectionMax),
		Blocks: []SlackBlock{
			header("Approval pending: " + p.RunID),
			{Type: "section", Fields: fields},
			section("*Reasons*\n" + reasons.String()),
			section("*Decide*\n```" + slackEscape(p.Commands.Accept, 500) + "\n" + slackEscape(p.Commands.Reject, 500) + "```\n" +
				"Review first: `" + slackEscape(p.Commands.Show, 500) + "`"),
			{Type: "context", Elements: []SlackText{mrkdwn("event " + slackEscape(p.EventID, 100))}},
		},
	}
	if p.Gone {
		msg.Blocks = append(msg.Blocks, section("_The approval was no longer in Redis when this notice was sent._"))
	}
	return marshal(msg)
}

// slackFinal is the Slack message of a run's final state.
func slackFinal(f Final) ([]byte, error) {
	title := fmt.Sprintf("Run %s %s", f.RunID, f.State)
	fields := []SlackText{field("Run", f.RunID), field("Task", f.TaskID), field("State", string(f.State)), field("Verdict", string(f.Verdict))}
	if f.Queue != "" {
		fields = append(fields, field("Queue", f.Queue))
	}
	if f.ApprovalID != "" {
		fields = append(fields, field("Approval", f.ApprovalID))
	}
	if f.DecidedBy != "" {
		fields = append(fields, field("Decided by", f.DecidedBy))
	}
	if f.PublishedTo != "" {
		fields = append(fields, field("Published to", f.PublishedTo))
	}
	blocks := []SlackBlock{header(title), {Type: "section", Fields: fields}}
	if f.Error != "" {
		blocks = append(blocks, section("*Error*\n"+slackEscape(f.Error, slackSectionMax-20)))
	}
	if f.Comment != "" {
		blocks = append(blocks, section("*Comment*\n"+slackEscape(f.Comment, slackSectionMax-20)))
	}
	blocks = append(blocks, SlackBlock{Type: "context", Elements: []SlackText{mrkdwn("event " + slackEscape(f.EventID, 100))}})
	text := title + " (verdict " + string(f.Verdict) + ")"
	if f.Error != "" {
		text += ": " + f.Error
	}
	return marshal(SlackMessage{Text: slackEscape(text, slackSectionMax), Blocks: blocks})
}
