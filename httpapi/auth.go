package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Scope is a permission a bearer token holds. No scope implies another.
type Scope string

// Scopes.
const (
	ScopeRunsWrite      Scope = "runs:write"      // POST /v1/runs
	ScopeRunsRead       Scope = "runs:read"       // GET /v1/runs/{task_id}, its events and result
	ScopeApprovalsRead  Scope = "approvals:read"  // GET /v1/approvals...
	ScopeApprovalsWrite Scope = "approvals:write" // POST /v1/approvals/{id}/accept|reject
)

// Scopes lists every scope, in the order of the documentation.
var Scopes = []Scope{ScopeRunsWrite, ScopeRunsRead, ScopeApprovalsRead, ScopeApprovalsWrite}

// Token is one bearer token of a token file: its name, its scopes and the
// SHA-256 of its value (never the value itself).
type Token struct {
	Name   string
	Scopes []Scope
	hash   [sha256.Size]byte
}

// Has reports whether the token holds scope s.
func (t *Token) Has(s Scope) bool { return slices.Contains(t.Scopes, s) }

// Tokens are the bearer tokens the API accepts. Only their SHA-256 hashes
// are kept; a presented token is hashed and compared with every one in
// constant time.
type Tokens struct {
	list []*Token
}

// MinPlainToken is the shortest token a token file may hold in plain text.
const MinPlainToken = 16

var (
	tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)
	hashRE      = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// ParseTokens reads a token file: one token per line,
//
//	NAME SCOPE[,SCOPE...] TOKEN
//
// separated by spaces or tabs, where NAME is 1-64 of [A-Za-z0-9._@+-]
// (it is logged, and is who decides when an approval names nobody), the
// scopes are among runs:write, runs:read, approvals:read and
// approvals:write, and TOKEN is "sha256:" and the 64 lower-case hex digits
// of the token's SHA-256 (what `api -hash-token` prints), or the token
// itself, at least 16 characters, hashed when read. Blank lines and lines
// starting with # are skipped. Names and tokens must be unique. Errors name
// the line (name is the file's name, for messages).
func ParseTokens(name string, r io.Reader) (*Tokens, error) {
	ts := &Tokens{}
	names := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, n, fmt.Sprintf(format, args...))
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fail("want NAME SCOPE[,SCOPE...] TOKEN, got %d fields", len(f))
		}
		t := &Token{Name: f[0]}
		if !tokenNameRE.MatchString(t.Name) {
			return nil, fail("name %q: want 1-64 of [A-Za-z0-9._@+-]", t.Name)
		}
		if prev, dup := names[t.Name]; dup {
			return nil, fail("name %q is used on line %d too", t.Name, prev)
		}
		names[t.Name] = n
		for _, s := range strings.Split(f[1], ",") {
			sc := Scope(s)
			if !slices.Contains(Scopes, sc) {
				return nil, fail("unknown scope %q (want %s)", s, scopeList())
			}
			if !t.Has(sc) {
				t.Scopes = append(t.Scopes, sc)
			}
		}
		switch tok := f[2]; {
		case hashRE.MatchString(tok):
			if _, err := hex.Decode(t.hash[:], []byte(tok[len("sha256:"):])); err != nil {
				return nil, fail("%v", err)
			}
		case strings.HasPrefix(tok, "sha256:"):
			return nil, fail("token of %s: sha256: must be followed by 64 lower-case hex digits", t.Name)
		case len(tok) < MinPlainToken:
			return nil, fail("token of %s is shorter than %d characters", t.Name, MinPlainToken)
		default:
			t.hash = sha256.Sum256([]byte(tok))
		}
		if prev, dup := hashes[t.hash]; dup {
			return nil, fail("the token of %s is the one on line %d", t.Name, prev)
		}
		hashes[t.hash] = n
		ts.list = append(ts.list, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(ts.list) == 0 {
		return nil, fmt.Errorf("%s: no token (want lines of NAME SCOPE[,SCOPE...] TOKEN)", name)
	}
	return ts, nil
}

// LoadTokens reads the token file at path (see ParseTokens). The file is
// read once; the plain values it may hold are not kept.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	return ParseTokens(path, bytes.NewReader(b))
}

// HashToken returns the form of token that a token file may hold instead
// of the token: "sha256:" and its hex SHA-256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Lookup returns the token whose value is presented, or nil. It hashes
// presented and compares the hash with every token's in constant time,
// never stopping early.
func (ts *Tokens) Lookup(presented string) *Token {
	if ts == nil || presented == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(presented))
	var found *Token
	for _, t := range ts.list {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			found = t
		}
	}
	return found
}

// Len returns how many tokens there are.
func (ts *Tokens) Len() int { return len(ts.list) }

func scopeList() string {
	s := make([]string, len(Scopes))
	for i, sc := range Scopes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}
