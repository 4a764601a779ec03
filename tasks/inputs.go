package tasks

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/airlock-run/airlock/limits"
)

// Input is a file the worker downloads into the workspace before the first
// step (never the step: it runs without network).
type Input struct {
	URL  string `json:"url"`
	Path string `json:"path"`
	// MaxBytes bounds the download; the worker's -fetch-max-bytes is its
	// default and maximum.
	MaxBytes limits.Bytes `json:"max_bytes,omitempty"`
	// SHA256, when set, is the hex digest the download must have.
	SHA256 string `json:"sha256,omitempty"`
	// Headers are sent with the request; their values may use
	// ${secret:NAME}.
	Headers map[string]string `json:"headers,omitempty"`
}

// Limits on inputs and secrets.
const (
	maxInputs  = 32
	maxSecrets = 32
	maxHeaders = 32
)

var (
	secretNameRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)
	secretRefRE  = regexp.MustCompile(`\$\{secret:([^}]*)\}`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
	hexRE        = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// SecretRefs returns the names s refers to with ${secret:NAME}.
func SecretRefs(s string) []string {
	var out []string
	for _, m := range secretRefRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// Expand replaces every ${secret:NAME} of s with value(NAME).
func Expand(s string, value func(name string) string) string {
	return secretRefRE.ReplaceAllStringFunc(s, func(m string) string {
		return value(secretRefRE.FindStringSubmatch(m)[1])
	})
}

// prepareSecrets checks the declared names, that ${secret:...} appears
// only where a secret may go (input headers, step env), and names only
// declared secrets.
func (s *Spec) prepareSecrets() error {
	if len(s.Secrets) > maxSecrets {
		return &FieldError{Field: "secrets", Msg: fmt.Sprintf("%d secrets, at most %d", len(s.Secrets), maxSecrets)}
	}
	declared := map[string]bool{}
	for i, n := range s.Secrets {
		if !secretNameRE.MatchString(n) {
			return &FieldError{Field: fmt.Sprintf("secrets[%d]", i), Msg: fmt.Sprintf("%q is not a secret name", n), Hint: "upper-case letters, digits and _, e.g. PARTNER_TOKEN"}
		}
		if declared[n] {
			return &FieldError{Field: fmt.Sprintf("secrets[%d]", i), Msg: fmt.Sprintf("%q is declared twice", n)}
		}
		declared[n] = true
	}
	use := func(field, v string) error {
		for _, n := range SecretRefs(v) {
			if !declared[n] {
				return &FieldError{Field: field, Msg: fmt.Sprintf("uses ${secret:%s}, which the spec does not declare", n), Hint: `add it to "secrets"`}
			}
		}
		return nil
	}
	nowhere := func(field, v string) error {
		if strings.Contains(v, "${secret:") {
			return &FieldError{Field: field, Msg: "a secret may be used only in inputs[].headers and steps[].env values"}
		}
		return nil
	}
	for i, in := range s.Inputs {
		for k, v := range in.Headers {
			if err := use(fmt.Sprintf("inputs[%d].headers[%q]", i, k), v); err != nil {
				return err
			}
		}
		if err := nowhere(fmt.Sprintf("inputs[%d].url", i), in.URL); err != nil {
			return err
		}
	}
	for i, st := range s.Steps {
		for k, v := range st.Env {
			if err := use(fmt.Sprintf("steps[%d].env[%q]", i, k), v); err != nil {
				return err
			}
		}
		for j, a := range st.Run {
			if err := nowhere(fmt.Sprintf("steps[%d].run[%d]", i, j), a); err != nil {
				return err
			}
		}
		if err := nowhere(fmt.Sprintf("steps[%d].stdin", i), st.Stdin); err != nil {
			return err
		}
	}
	for p, f := range s.Files {
		if err := nowhere(fmt.Sprintf("files[%q]", p), string(f)); err != nil {
			return err
		}
	}
	return nil
}

// prepareInputs checks the inputs against the worker's maximum download
// size (p.MaxInputBytes) and fills in their max_bytes.
func (s *Spec) prepareInputs(maxBytes limits.Bytes) error {
	if len(s.Inputs) > maxInputs {
		return &FieldError{Field: "inputs", Msg: fmt.Sprintf("%d inputs, at most %d", len(s.Inputs), maxInputs)}
	}
	paths := map[string]bool{}
	for i := range s.Inputs {
		in := &s.Inputs[i]
		f := fmt.Sprintf("inputs[%d]", i)
		u, err := url.Parse(in.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &FieldError{Field: f + ".url", Msg: fmt.Sprintf("%q is not an http or https URL", in.URL)}
		}
		if err := CheckPath(f+".path", in.Path); err != nil {
			return err
		}
		if _, dup := s.Files[in.Path]; dup || paths[in.Path] {
			return &FieldError{Field: f + ".path", Msg: fmt.Sprintf("%q is written by another input or by files", in.Path)}
		}
		paths[in.Path] = true
		switch {
		case in.MaxBytes == 0:
			in.MaxBytes = maxBytes
		case in.MaxBytes > maxBytes:
			return &FieldError{Field: f + ".max_bytes", Msg: fmt.Sprintf("%s is above the worker's maximum %s", in.MaxBytes, maxBytes)}
		}
		if in.SHA256 != "" && !hexRE.MatchString(in.SHA256) {
			return &FieldError{Field: f + ".sha256", Msg: "want 64 lower-case hex digits"}
		}
		if len(in.Headers) > maxHeaders {
			return &FieldError{Field: f + ".headers", Msg: fmt.Sprintf("%d headers, at most %d", len(in.Headers), maxHeaders)}
		}
		for k, v := range in.Headers {
			if !headerNameRE.MatchString(k) {
				return &FieldError{Field: fmt.Sprintf("%s.headers[%q]", f, k), Msg: "is not a header name"}
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return &FieldError{Field: fmt.Sprintf("%s.headers[%q]", f, k), Msg: "value holds a line break or NUL"}
			}
		}
	}
	return nil
}

// DigestHex is the hex form of a SHA-256 digest, as inputs[].sha256 takes.
func DigestHex(sum [32]byte) string { return hex.EncodeToString(sum[:]) }
