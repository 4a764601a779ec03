// Package secrets gives a run the secrets its spec names, from the
// worker's side only (never through Redis): a file per name in the
// worker's secrets directory, or the environment variable
// AIRLOCK_SECRET_<NAME>; the file wins when both exist. A Set also redacts
// its values, and their base64, URL-encoded and JSON-escaped forms, from
// what the run reports.
package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// EnvPrefix prefixes the environment variable of a secret.
const EnvPrefix = "AIRLOCK_SECRET_"

// MinLength is the shortest secret value accepted: a shorter one would
// redact ordinary text.
const MinLength = 6

// maxFile bounds a secret file.
const maxFile = 64 << 10

// Mask replaces a secret's value wherever it is redacted.
const Mask = "[REDACTED]"

// ErrMissing is matched by the error of a secret the worker does not have.
var ErrMissing = errors.New("secret not provided by the worker")

// Source is where a worker's secrets come from.
type Source struct {
	Dir string // -secrets-dir: one file per name; "" for none
}

// Get returns the value of name: the file Dir/name (its content, without
// one trailing newline) or, when there is none, $AIRLOCK_SECRET_<name>.
func (s Source) Get(name string) (string, error) {
	if s.Dir != "" {
		v, err := readFile(filepath.Join(s.Dir, name))
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("secret %s: %v", name, err)
		}
	}
	if v, ok := os.LookupEnv(EnvPrefix + name); ok {
		return v, nil
	}
	return "", fmt.Errorf("%w: %s (give it as the file %s in -secrets-dir or as $%s%s)", ErrMissing, name, name, EnvPrefix, name)
}

// readFile reads a secret file: a regular file (never a FIFO, which would
// block), at most maxFile bytes, without one trailing newline.
func readFile(path string) (string, error) {
	// Symlinks are followed: the directory is the operator's, and
	// Kubernetes mounts secrets as symlinks.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxFile {
		return "", fmt.Errorf("file above %d bytes", maxFile)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// Set is the secrets of one run.
type Set struct {
	values map[string]string
	forms  [][]byte // every value's forms, longest first
	names  map[string]string
}

// Load reads names; an error names the first it could not get (never a
// value).
func (s Source) Load(names []string) (*Set, error) {
	set := &Set{values: map[string]string{}, names: map[string]string{}}
	for _, n := range names {
		v, err := s.Get(n)
		if err != nil {
			return nil, err
		}
		if len(v) < MinLength {
			return nil, fmt.Errorf("secret %s: shorter than %d bytes, too short to redact safely", n, MinLength)
		}
		set.values[n] = v
		for _, f := range forms(v) {
			if _, dup := set.names[f]; !dup {
				set.names[f] = n
				set.forms = append(set.forms, []byte(f))
			}
		}
	}
	slices.SortFunc(set.forms, func(a, b []byte) int { return len(b) - len(a) })
	return set, nil
}

// forms are the spellings of v that redaction looks for.
func forms(v string) []string {
	b := []byte(v)
	out := []string{v,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		url.QueryEscape(v), url.PathEscape(v), jsonEscaped(v),
	}
	var keep []string
	for _, f := range out {
		if len(f) >= MinLength && !slices.Contains(keep, f) {
			keep = append(keep, f)
		}
	}
	return keep
}

// jsonEscaped is v as it appears inside a JSON string.
func jsonEscaped(v string) string {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	return string(b[1 : len(b)-1])
}

// Value returns the value of a loaded secret.
func (s *Set) Value(name string) string {
	if s == nil {
		return ""
	}
	return s.values[name]
}

// Empty reports whether the set holds no secret.
func (s *Set) Empty() bool { return s == nil || len(s.values) == 0 }

// Redact replaces every form of every value in t with Mask.
func (s *Set) Redact(t string) string {
	if s.Empty() || t == "" {
		return t
	}
	b, found := s.RedactBytes([]byte(t))
	if len(found) == 0 {
		return t
	}
	return string(b)
}

// TrimCut returns b without its last bytes: as many as the longest form
// of the set's values less one (all of b when it is shorter). It is for
// text cut at a cap: a value cut there is not whole, so RedactBytes does
// not find it, and its first bytes would be kept. What it drops does not
// depend on what b holds: dropping only a tail that begins a value would
// tell whoever wrote b, by the length kept, whether it guessed the value's
// first bytes, one byte at a time. A truncated stream loses that tail,
// ordinary text or not.
func (s *Set) TrimCut(b []byte) []byte {
	if s.Empty() {
		return b
	}
	cut := min(len(s.forms[0])-1, len(b)) // forms are sorted longest first
	return b[:len(b)-cut]
}

// RedactBytes returns b with every form of every value replaced by Mask,
// and the names of the secrets found (sorted, once each).
func (s *Set) RedactBytes(b []byte) ([]byte, []string) {
	if s.Empty() {
		return b, nil
	}
	var found []string
	for _, f := range s.forms {
		if bytes.Contains(b, f) {
			b = bytes.ReplaceAll(b, f, []byte(Mask))
			if n := s.names[string(f)]; !slices.Contains(found, n) {
				found = append(found, n)
			}
		}
	}
	slices.Sort(found)
	return b, found
}

// Longest is the length of the longest form of the set's values (0 for
// an empty set): a stream cut anywhere holds back one byte less than it,
// so that a value it holds is whole when redacted.
func (s *Set) Longest() int {
	if s.Empty() {
		return 0
	}
	return len(s.forms[0])
}

// Straddle returns cut moved back to the start of any form of a value
// that b holds whole across it (a value that begins before cut and ends
// after it), so that b[:cut] and b[cut:] can be redacted apart.
func (s *Set) Straddle(b []byte, cut int) int {
	if s.Empty() || cut <= 0 {
		return cut
	}
	for moved := true; moved; {
		moved = false
		for _, f := range s.forms {
			for i := max(cut-len(f)+1, 0); i < cut; i++ {
				if bytes.HasPrefix(b[i:], f) && i+len(f) > cut {
					cut, moved = i, true
					break
				}
			}
		}
	}
	return cut
}
