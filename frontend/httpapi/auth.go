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

	"github.com/airlock-run/airlock/tasks"
)

// Scope is a permission a bearer token holds. No scope implies another,
// but runs:read:any, which is runs:read over every principal's runs
// (Token.Grants).
type Scope string

// Scopes.
const (
	ScopeRunsWrite Scope = "runs:write" // POST /v1/runs
	// ScopeRunsRead reads the token's own runs (their principal is its
	// name): GET /v1/runs/{task_id}, its events and result. Another's
	// run is 404, as an unknown one.
	ScopeRunsRead Scope = "runs:read"
	// ScopeRunsReadAny reads every run, whoever enqueued it (and a run
	// with no principal): runs:read's routes, for dashboards and
	// auditors.
	ScopeRunsReadAny    Scope = "runs:read:any"
	ScopeApprovalsRead  Scope = "approvals:read"  // GET /v1/approvals...
	ScopeApprovalsWrite Scope = "approvals:write" // POST /v1/approvals/{id}/accept|reject
)

// Scopes lists every scope, in the order of the documentation.
var Scopes = []Scope{ScopeRunsWrite, ScopeRunsRead, ScopeRunsReadAny, ScopeApprovalsRead, ScopeApprovalsWrite}

// Token is one bearer token of a token file: its name, its scopes, the
// queues and actions it is bound to, and the SHA-256 of its value (never
// the value itself).
type Token struct {
	// Name is who the token is: every run it enqueues is stamped with it
	// (the spec's principal), every decision it makes is recorded as its.
	Name   string
	Scopes []Scope
	// Queues, when not empty, are the only queues the token may enqueue
	// in, read runs of, and read and decide approvals of (queues=).
	Queues []string
	// Actions, when not empty, are the only catalog actions the token may
	// enqueue runs of: it may not enqueue a free-form spec (actions=).
	Actions []string
	hash    [sha256.Size]byte
}

// Has reports whether the token holds scope s.
func (t *Token) Has(s Scope) bool { return slices.Contains(t.Scopes, s) }

// Grants reports whether the token may use a route of scope s: it holds
// s, or s is runs:read and it holds runs:read:any.
func (t *Token) Grants(s Scope) bool {
	return t.Has(s) || (s == ScopeRunsRead && t.Has(ScopeRunsReadAny))
}

// MayRead reports whether the token may read a run whose principal is
// principal: with runs:read:any any run, with runs:read its own only (a
// run with no principal is nobody's). The queues it is bound to are
// checked apart (AllowsQueue).
func (t *Token) MayRead(principal string) bool {
	switch {
	case t.Has(ScopeRunsReadAny):
		return true
	case t.Has(ScopeRunsRead):
		return principal != "" && principal == t.Name
	}
	return false
}

// AllowsQueue reports whether the token may use queue q: it is bound to
// no queue, or q is one of its queues.
func (t *Token) AllowsQueue(q string) bool { return len(t.Queues) == 0 || slices.Contains(t.Queues, q) }

// AllowsAction reports whether the token may enqueue a spec whose action
// is a ("" for a free-form spec): it is bound to no action, or a is one
// of its actions.
func (t *Token) AllowsAction(a string) bool {
	return len(t.Actions) == 0 || (a != "" && slices.Contains(t.Actions, a))
}

// MayRun reports whether the token may enqueue a run of action a ("" for
// a free-form spec) in queue q: both AllowsQueue and AllowsAction.
func (t *Token) MayRun(q, a string) bool { return t.AllowsQueue(q) && t.AllowsAction(a) }

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
//	NAME SCOPE[,SCOPE...] TOKEN [queues=Q[,Q...]] [actions=A[,A...]]
//
// separated by spaces or tabs, where NAME is 1-64 of [A-Za-z0-9._@+-]
// (it is logged, stamped on every run the token enqueues as its principal,
// and recorded as who decides), the scopes are among runs:write,
// runs:read, runs:read:any, approvals:read and approvals:write, and TOKEN is "sha256:"
// and the 64 lower-case hex digits of the token's SHA-256 (what `api
// -hash-token` prints), or the token itself, at least 16 characters,
// hashed when read. queues= binds the token to those queues (queue names,
// as a spec's), actions= to those catalog actions (action names); each
// at most once per line. Blank lines and lines starting with # are
// skipped. Names and tokens must be unique. Errors name the line (name is
// the file's name, for messages).
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
		if len(f) < 3 || len(f) > 5 {
			return nil, fail("want NAME SCOPE[,SCOPE...] TOKEN [queues=Q,...] [actions=A,...], got %d fields", len(f))
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
		case strings.HasPrefix(tok, "queues=") || strings.HasPrefix(tok, "actions="):
			return nil, fail("token of %s: the third field is a binding (queues= or actions=): the token comes third, its bindings after it", t.Name)
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
		if err := t.parseBindings(f[3:]); err != nil {
			return nil, fail("token %s: %v", t.Name, err)
		}
		hashes[t.hash] = n
		ts.list = append(ts.list, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(ts.list) == 0 {
		return nil, fmt.Errorf("%s: no token (want lines of NAME SCOPE[,SCOPE...] TOKEN [queues=Q,...] [actions=A,...])", name)
	}
	return ts, nil
}

// parseBindings reads the fields after a token: queues= and actions=,
// each at most once, each a comma-separated list of valid names.
func (t *Token) parseBindings(fields []string) error {
	for _, f := range fields {
		key, list, ok := strings.Cut(f, "=")
		var dst *[]string
		valid, what := tasks.ValidQueue, "queue"
		switch {
		case !ok:
			return fmt.Errorf("%q: want queues=Q[,Q...] or actions=A[,A...]", f)
		case key == "queues":
			dst = &t.Queues
		case key == "actions":
			dst, valid, what = &t.Actions, tasks.ValidActionName, "action"
		default:
			return fmt.Errorf("unknown binding %q (want queues= or actions=)", key)
		}
		if *dst != nil {
			return fmt.Errorf("%s= is given twice", key)
		}
		*dst = []string{}
		for _, name := range strings.Split(list, ",") {
			if !valid(name) {
				return fmt.Errorf("%s=: %q is not %s name (1-64 of %s)", key, name, article(what), charset(what))
			}
			if !slices.Contains(*dst, name) {
				*dst = append(*dst, name)
			}
		}
	}
	return nil
}

func article(what string) string {
	if what == "action" {
		return "an action"
	}
	return "a " + what
}

func charset(what string) string {
	if what == "action" {
		return "[A-Za-z0-9._-]"
	}
	return "[A-Za-z0-9_-]"
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
