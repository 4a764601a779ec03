package webhook

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
)

// Formats of an endpoint's body.
const (
	// FormatStandard is the Standard Webhooks envelope {"type",
	// "timestamp", "data"}, signed.
	FormatStandard = "standard"
	// FormatSlack is a Slack incoming-webhook message {"text", "blocks"}.
	FormatSlack = "slack"
)

// Event types an endpoint may ask for.
const (
	// EventApprovalPending: a run's output was parked and waits for a
	// human (data: Pending).
	EventApprovalPending = "approval.pending"
	// EventRunFinal: a run reached a state it does not leave: promoted,
	// rejected, expired, failed or completed (data: Final).
	EventRunFinal = "run.final"
)

// EventTypes lists every event type, in the order the documentation
// gives them.
var EventTypes = []string{EventApprovalPending, EventRunFinal}

// Secret lengths (decoded bytes) the Standard Webhooks specification asks
// for.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// SecretPrefix starts the text form of a secret: "whsec_" and the base64
// of its bytes.
const SecretPrefix = "whsec_"

// Endpoint is one receiver the operator configured.
type Endpoint struct {
	// URL is where events are POSTed: http or https. Its path and query
	// may be a secret of their own (a Slack webhook URL is): logs and
	// errors show only its scheme and host (String).
	URL string
	// Secret is the signing key (the bytes, decoded from "whsec_…").
	// Required for FormatStandard; for FormatSlack, when empty, no
	// webhook-signature header is sent.
	Secret []byte
	// Format is FormatStandard (when "") or FormatSlack.
	Format string
	// Events are the event types the endpoint receives; empty means every
	// type for FormatStandard and EventApprovalPending for FormatSlack.
	Events []string
}

// FlagUsage documents the value of the repeatable -webhook flag, as
// ParseFlag reads it.
const FlagUsage = `-webhook URL,secret=whsec_…[,format=standard|slack][,events=TYPE|TYPE]
                          send events to URL (repeatable). secret= is the Standard Webhooks
                          signing secret (whsec_ and the base64 of 24-64 random bytes); or
                          secret_file=PATH (the file holds it; preferred: a flag shows in ps) or
                          secret_env=NAME. Required but for format=slack. format=slack sends
                          a Slack message (Slack incoming webhook URL). events: approval.pending,
                          run.final (default: both; slack: approval.pending). A comma in URL
                          must be written %2C`

// ParseFlag parses one -webhook flag value (see FlagUsage):
//
//	URL[,secret=whsec_…|,secret_file=PATH|,secret_env=NAME][,format=standard|slack][,events=T1|T2]
//
// URL comes first and may not hold a comma (write it %2C); every other
// part is key=value. Errors name the part that is wrong, never the
// secret, and show the URL without its path.
func ParseFlag(s string) (Endpoint, error) {
	parts := strings.Split(strings.TrimSpace(s), ",")
	var e Endpoint
	e.URL = strings.TrimSpace(parts[0])
	if err := checkURL(e.URL); err != nil {
		return Endpoint{}, fmt.Errorf("webhook %s: %w", redactURL(e.URL), err)
	}
	name := redactURL(e.URL)
	seen := map[string]bool{}
	secrets := 0
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || k == "" {
			return Endpoint{}, fmt.Errorf("webhook %s: %q: want key=value (secret=, secret_file=, secret_env=, format=, events=); a comma in the URL must be written %%2C", name, cut(p, 40))
		}
		if seen[k] {
			return Endpoint{}, fmt.Errorf("webhook %s: %s= given twice", name, k)
		}
		seen[k] = true
		switch k {
		case "secret":
			secrets++
			b, err := ParseSecret(v)
			if err != nil {
				return Endpoint{}, fmt.Errorf("webhook %s: secret: %w", name, err)
			}
			e.Secret = b
		case "secret_file":
			secrets++
			raw, err := os.ReadFile(v)
			if err != nil {
				return Endpoint{}, fmt.Errorf("webhook %s: secret_file: %w", name, err)
			}
			b, err := ParseSecret(strings.TrimSpace(string(raw)))
			if err != nil {
				return Endpoint{}, fmt.Errorf("webhook %s: secret_file %s: %w", name, v, err)
			}
			e.Secret = b
		case "secret_env":
			secrets++
			raw, ok := os.LookupEnv(v)
			if !ok {
				return Endpoint{}, fmt.Errorf("webhook %s: secret_env: $%s is not set", name, v)
			}
			b, err := ParseSecret(strings.TrimSpace(raw))
			if err != nil {
				return Endpoint{}, fmt.Errorf("webhook %s: secret_env $%s: %w", name, v, err)
			}
			e.Secret = b
		case "format":
			if v != FormatStandard && v != FormatSlack {
				return Endpoint{}, fmt.Errorf("webhook %s: format=%q: want %s or %s", name, cut(v, 40), FormatStandard, FormatSlack)
			}
			e.Format = v
		case "events":
			for _, t := range strings.Split(v, "|") {
				t = strings.TrimSpace(t)
				if !slices.Contains(EventTypes, t) {
					return Endpoint{}, fmt.Errorf("webhook %s: events: %q: want %s (separated by |)", name, cut(t, 40), strings.Join(EventTypes, " or "))
				}
				if !slices.Contains(e.Events, t) {
					e.Events = append(e.Events, t)
				}
			}
		default:
			return Endpoint{}, fmt.Errorf("webhook %s: unknown option %q (want secret=, secret_file=, secret_env=, format= or events=)", name, cut(k, 40))
		}
	}
	if secrets > 1 {
		return Endpoint{}, fmt.Errorf("webhook %s: give one of secret=, secret_file= and secret_env=", name)
	}
	if err := e.Validate(); err != nil {
		return Endpoint{}, err
	}
	return e, nil
}

// ParseSecret decodes a secret in its Standard Webhooks text form:
// "whsec_" and the standard base64 of 24 to 64 bytes.
func ParseSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, errors.New("want whsec_ followed by base64 (the Standard Webhooks form)")
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, errors.New("not valid base64 after whsec_")
	}
	if len(b) < MinSecretBytes || len(b) > MaxSecretBytes {
		return nil, fmt.Errorf("%d bytes after decoding; want %d to %d", len(b), MinSecretBytes, MaxSecretBytes)
	}
	return b, nil
}

// NewSecret returns a new random secret of 32 bytes in its text form
// ("whsec_…"), for an operator to give both Airlock and the receiver.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// Validate checks e: an http or https URL with a host, a known format, a
// secret of the right length (required for FormatStandard), known event
// types.
func (e Endpoint) Validate() error {
	if err := checkURL(e.URL); err != nil {
		return fmt.Errorf("webhook %s: %w", e, err)
	}
	switch e.Format {
	case "", FormatStandard:
		if len(e.Secret) == 0 {
			return fmt.Errorf("webhook %s: a secret is required (secret=, secret_file= or secret_env=); only format=slack goes without", e)
		}
	case FormatSlack:
	default:
		return fmt.Errorf("webhook %s: format %q: want %s or %s", e, cut(e.Format, 40), FormatStandard, FormatSlack)
	}
	if len(e.Secret) > 0 && (len(e.Secret) < MinSecretBytes || len(e.Secret) > MaxSecretBytes) {
		return fmt.Errorf("webhook %s: secret of %d bytes; want %d to %d", e, len(e.Secret), MinSecretBytes, MaxSecretBytes)
	}
	for _, t := range e.Events {
		if !slices.Contains(EventTypes, t) {
			return fmt.Errorf("webhook %s: event type %q: want %s", e, cut(t, 40), strings.Join(EventTypes, " or "))
		}
	}
	return nil
}

// String is the endpoint's URL without its path, query or credentials
// (which may be secrets), and its format when not standard.
func (e Endpoint) String() string {
	s := redactURL(e.URL)
	if e.Format == FormatSlack {
		s += " (slack)"
	}
	return s
}

// Wants reports whether e receives events of type typ.
func (e Endpoint) Wants(typ string) bool {
	if len(e.Events) == 0 {
		return e.Format != FormatSlack || typ == EventApprovalPending
	}
	return slices.Contains(e.Events, typ)
}

// format returns e's format, FormatStandard when unset.
func (e Endpoint) format() string {
	if e.Format == "" {
		return FormatStandard
	}
	return e.Format
}

// key names e in a delivery task (never its URL or secret, which stay out
// of Redis): the first 16 hex digits of the sha256 of its URL and format.
func (e Endpoint) key() string {
	sum := sha256.Sum256([]byte(e.URL + "\x00" + e.format()))
	return hex.EncodeToString(sum[:8])
}

// checkEndpoints validates every endpoint and refuses one listed twice.
func checkEndpoints(eps []Endpoint) error {
	seen := map[string]bool{}
	for _, e := range eps {
		if err := e.Validate(); err != nil {
			return err
		}
		if seen[e.key()] {
			return fmt.Errorf("webhook %s: listed twice", e)
		}
		seen[e.key()] = true
	}
	return nil
}

func checkURL(raw string) error {
	if raw == "" {
		return errors.New("URL: empty (the value starts with the URL: URL,secret=…)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("URL: not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL: scheme %q: want http or https", cut(u.Scheme, 20))
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("URL: no host")
	}
	if u.Fragment != "" {
		return errors.New("URL: a fragment (#…) is never sent")
	}
	return nil
}

// redactURL returns scheme://host of raw, with "/…" when it has a path or
// query: enough to tell endpoints apart in a log without their secrets.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.Host == "" {
		return "(URL without a host)"
	}
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		s += "/…"
	}
	return s
}

// cut bounds s to n bytes for an error message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
