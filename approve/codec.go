package approve

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func parseMicros(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	return time.UnixMicro(n).UTC(), nil
}

// normTime is t as it reads back from Redis.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// encode returns the hash fields of a as name, value pairs.
func encode(a *Approval) ([]any, error) {
	reasons, err := json.Marshal(a.Reasons)
	if err != nil {
		return nil, err
	}
	arts, err := json.Marshal(a.Artifacts)
	if err != nil {
		return nil, err
	}
	run, err := json.Marshal(a.Run)
	if err != nil {
		return nil, fmt.Errorf("run summary: %w", err)
	}
	p := []any{fID, a.ID, fTaskID, a.TaskID, fRunID, a.RunID, fState, string(a.State),
		fReasons, string(reasons), fArtifacts, string(arts), fRun, string(run), fQueue, a.Run.Queue}
	if len(a.Result) > 0 {
		p = append(p, fResult, string(a.Result))
	}
	for _, f := range []struct {
		name string
		t    time.Time
	}{{fCreatedAt, a.CreatedAt}, {fExpiresAt, a.ExpiresAt}, {fDecidedAt, a.DecidedAt}, {fPromoted, a.PromotedAt}} {
		if !f.t.IsZero() {
			p = append(p, f.name, micros(f.t))
		}
	}
	if a.DecidedBy != "" {
		p = append(p, fDecidedBy, a.DecidedBy)
	}
	if a.ResultSHA256 != "" {
		p = append(p, fResultSHA, a.ResultSHA256)
	}
	if a.Comment != "" {
		p = append(p, fComment, a.Comment)
	}
	if a.ByNote != "" {
		p = append(p, fByNote, a.ByNote)
	}
	if a.Run.Principal != "" {
		p = append(p, fPrincipal, a.Run.Principal)
	}
	if len(a.Checked) > 0 {
		checked, err := json.Marshal(a.Checked)
		if err != nil {
			return nil, err
		}
		p = append(p, fChecked, string(checked))
	}
	if a.Run.Action != "" {
		p = append(p, fAction, a.Run.Action)
	}
	if a.StagedBytes > 0 {
		p = append(p, fStaged, strconv.FormatInt(a.StagedBytes, 10))
	}
	if a.TraceParent != "" {
		p = append(p, fTrace, a.TraceParent)
	}
	return p, nil
}

// setField decodes one hash field into a.
func setField(a *Approval, name, v string) error {
	var err error
	switch name {
	case fID:
		a.ID = v
	case fTaskID:
		a.TaskID = v
	case fRunID:
		a.RunID = v
	case fState:
		a.State = State(v)
	case fCreatedAt:
		a.CreatedAt, err = parseMicros(v)
	case fExpiresAt:
		a.ExpiresAt, err = parseMicros(v)
	case fDecidedAt:
		a.DecidedAt, err = parseMicros(v)
	case fPromoted:
		a.PromotedAt, err = parseMicros(v)
	case fPublished:
		a.PublishedTo = v
	case fReasons:
		var ok bool
		if a.Reasons, ok = plainStrings(v); !ok {
			err = json.Unmarshal([]byte(v), &a.Reasons)
		}
	case fArtifacts:
		err = json.Unmarshal([]byte(v), &a.Artifacts)
	case fRun:
		q, pr, ac := a.Run.Queue, a.Run.Principal, a.Run.Action
		err = json.Unmarshal([]byte(v), &a.Run)
		if q != "" {
			a.Run.Queue = q
		}
		if pr != "" {
			a.Run.Principal = pr
		}
		if ac != "" {
			a.Run.Action = ac
		}
	case fQueue:
		a.Run.Queue = v
	case fPrincipal:
		a.Run.Principal = v
	case fAction:
		a.Run.Action = v
	case fChecked:
		err = json.Unmarshal([]byte(v), &a.Checked)
	case fByNote:
		a.ByNote = v
	case fResult:
		a.Result = []byte(v)
	case fDecidedBy:
		a.DecidedBy = v
	case fComment:
		a.Comment = v
	case fResultSHA:
		a.ResultSHA256 = v
	case fStaged:
		a.StagedBytes, err = strconv.ParseInt(v, 10, 64)
	case fTrace:
		a.TraceParent = v
	}
	if err != nil {
		return fmt.Errorf("field %s: %w", name, err)
	}
	return nil
}

// plainStrings decodes a JSON array of strings without escapes, as
// json.Marshal writes a []string of plain text, without copying them (List
// decodes thousands); ok is false for anything else.
func plainStrings(v string) (out []string, ok bool) {
	switch v {
	case "null":
		return nil, true
	case "[]":
		return []string{}, true
	}
	if len(v) < 4 || v[0] != '[' || v[len(v)-1] != ']' || strings.IndexByte(v, '\\') >= 0 {
		return nil, false
	}
	out = make([]string, 0, strings.Count(v, `","`)+1)
	rest := v[1 : len(v)-1]
	for {
		if len(rest) < 2 || rest[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(rest[1:], '"') + 1
		if end == 0 {
			return nil, false
		}
		out = append(out, rest[1:end])
		rest = rest[end+1:]
		if rest == "" {
			return out, true
		}
		if rest[0] != ',' {
			return nil, false
		}
		rest = rest[1:]
	}
}

// decodePairs decodes a flat list of field, value pairs (HGETALL or a
// script's view).
func decodePairs(v any) (*Approval, error) {
	l, ok := v.([]any)
	if !ok || len(l)%2 != 0 {
		return nil, fmt.Errorf("approve: unexpected reply %T", v)
	}
	a := &Approval{}
	for i := 0; i < len(l); i += 2 {
		name, _ := l[i].(string)
		val, _ := l[i+1].(string)
		if err := setField(a, name, val); err != nil {
			return nil, fmt.Errorf("approve: decoding approval: %w", err)
		}
	}
	return a, nil
}
