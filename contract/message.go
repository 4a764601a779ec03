package contract

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/xeipuuv/gojsonschema"
)

// A Violation's Message is gojsonschema's (its default locale). Most
// messages start with a word of the validator's ("Additional property x is
// not allowed", "Does not match pattern …"); a few start with a name of the
// document's, whose case is its own ("day is required").

// missingMark ends the message of a missing required property: " is
// required" of "{{.property}} is required".
var missingMark = afterName(gojsonschema.Locale.Required())

// nameMarks follow the name a message starts with, in the messages that
// start with one: a missing property, a const or an enum a field does not
// match, items that are not unique.
var nameMarks = []string{missingMark, afterName(gojsonschema.Locale.Const()),
	afterName(gojsonschema.Locale.Enum()), afterName(gojsonschema.Locale.Unique())}

// afterName returns the text of a message template between its first
// variable and the next one (or its end).
func afterName(template string) string {
	_, rest, _ := strings.Cut(template, "}}")
	text, _, _ := strings.Cut(rest, "{{")
	return text
}

// missing reports whether v is a required property its object lacks:
// Path is the object, Message names the property ("day is required").
func missing(v Violation) bool { return strings.HasSuffix(v.Message, missingMark) }

// MissingFirst orders violations for slices.SortFunc: a missing required
// property ("day is required") before any other, which says what the
// document lacks before what it holds wrong.
func MissingFirst(a, b Violation) int {
	switch ma, mb := missing(a), missing(b); {
	case ma == mb:
		return 0
	case ma:
		return -1
	}
	return 1
}

// Sentence returns v's message as it reads after a field's name
// ("params: additional property date is not allowed"): its first letter
// lowercased, unless the message starts with a name of the document's
// ("Day is required"), which keeps its case.
func Sentence(v Violation) string {
	for _, m := range nameMarks {
		if strings.Contains(v.Message, m) {
			return v.Message
		}
	}
	r, n := utf8.DecodeRuneInString(v.Message)
	return string(unicode.ToLower(r)) + v.Message[n:]
}
