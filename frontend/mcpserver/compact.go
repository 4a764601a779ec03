package mcpserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-run/airlock/record"
)

// Compact answers: what a tool answers of a run record unless the call
// asks for the whole of it (full: true). The isolation tiers, one long
// text per tier and the same for every run of a worker, are said once:
// the record holds {mode, uid, off, uri}, and the resource at uri (read
// with resources/read) holds the text. Empty bulk is left out too: a
// step's empty stderr, its byte counts and truncation flags when the
// record kept all the step wrote, kept_output when nothing was dropped.

// IsolationURI is the resource of every isolation this server has
// answered about, by id; IsolationURI + "/" + id is one of them.
const IsolationURI = "airlock://isolation"

// maxIsolations bounds the isolations a server keeps for its resources.
const maxIsolations = 64

// isolations keeps the isolations the server's answers referred to, by
// id, the least recently cited forgotten past maxIsolations (an answer's
// id stays readable however old its isolation is).
type isolations struct {
	mu    sync.Mutex
	byID  map[string]record.Isolation
	order []string
}

// add keeps iso (its uid, which differs from run to run, left out) and
// returns its id: the first 12 hex digits of its JSON's SHA-256.
func (c *isolations) add(iso record.Isolation) string {
	iso.UID = 0
	b, _ := json.Marshal(iso)
	sum := sha256.Sum256(b)
	id := hex.EncodeToString(sum[:6])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]record.Isolation{}
	}
	if _, ok := c.byID[id]; ok {
		// Cited again: the most recent.
		i := slices.Index(c.order, id)
		c.order = append(append(c.order[:i:i], c.order[i+1:]...), id)
		return id
	}
	if len(c.order) >= maxIsolations {
		delete(c.byID, c.order[0])
		c.order = c.order[1:]
	}
	c.byID[id] = iso
	c.order = append(c.order, id)
	return id
}

// get returns the isolation of id.
func (c *isolations) get(id string) (record.Isolation, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	iso, ok := c.byID[id]
	return iso, ok
}

// all returns every isolation kept, by id.
func (c *isolations) all() map[string]record.Isolation {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]record.Isolation, len(c.byID))
	for id, iso := range c.byID {
		out[id] = iso
	}
	return out
}

// isolationRef is what a compact record says of its isolation.
type isolationRef struct {
	Mode string `json:"mode"`
	// UID is the uid the run's steps ran as.
	UID int `json:"uid,omitempty"`
	// Off names the tiers that were off (their text starts with "off").
	Off []string `json:"off,omitempty"`
	// URI is the resource holding the tiers' text.
	URI string `json:"uri"`
}

// compactRun is a run record without its bulk: the fields it declares
// hide the embedded record's of the same JSON names.
type compactRun struct {
	*record.Run
	Isolation  *isolationRef      `json:"isolation,omitempty"`
	KeptOutput *record.KeptOutput `json:"kept_output,omitempty"`
	Steps      []compactStep      `json:"steps,omitempty"`
}

// compactStep is a step's record without what it says twice: its
// stdout_bytes and stderr_bytes (and the truncation flags) only when
// the record did not keep all the step wrote, its stdout and stderr
// only when not empty.
type compactStep struct {
	*record.Step
	Stdout          string `json:"stdout,omitempty"`
	Stderr          string `json:"stderr,omitempty"`
	StdoutBytes     int64  `json:"stdout_bytes,omitempty"`
	StderrBytes     int64  `json:"stderr_bytes,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// answerRecord is what an answer holds of rec: rec itself when full,
// else its compact form (its isolation kept for the resources).
func (s *server) answerRecord(rec *record.Run, full bool) any {
	if full || rec == nil {
		return rec
	}
	c := &compactRun{Run: rec, Steps: compactSteps(rec.Steps)}
	if rec.Isolation != (record.Isolation{}) {
		id := s.iso.add(rec.Isolation)
		c.Isolation = &isolationRef{Mode: rec.Isolation.Mode, UID: rec.Isolation.UID, Off: offTiers(rec.Isolation),
			URI: IsolationURI + "/" + id}
	}
	if k := rec.KeptOutput; k != nil && (k.Reached || k.DroppedBytes > 0) {
		c.KeptOutput = k
	}
	return c
}

// answerStep is what an answer holds of a step: st itself when full,
// else its compact form.
func answerStep(st *record.Step, full bool) any {
	if full || st == nil {
		return st
	}
	return compactSteps([]record.Step{*st})[0]
}

// compactSteps returns the compact form of steps (nil for none).
func compactSteps(steps []record.Step) []compactStep {
	if len(steps) == 0 {
		return nil
	}
	out := make([]compactStep, len(steps))
	for i := range steps {
		st := &steps[i]
		c := compactStep{Step: st, Stdout: st.Stdout, Stderr: st.Stderr}
		if st.StdoutTruncated || st.StdoutEncoding != "" || st.StdoutBytes != int64(len(st.Stdout)) {
			c.StdoutBytes, c.StdoutTruncated = st.StdoutBytes, st.StdoutTruncated
		}
		if st.StderrTruncated || st.StderrEncoding != "" || st.StderrBytes != int64(len(st.Stderr)) {
			c.StderrBytes, c.StderrTruncated = st.StderrBytes, st.StderrTruncated
		}
		out[i] = c
	}
	return out
}

// offTiers names the tiers of iso that were off.
func offTiers(iso record.Isolation) []string {
	var off []string
	for _, t := range []struct{ name, v string }{
		{"user", iso.User}, {"network", iso.Network}, {"root", iso.Root}, {"landlock", iso.Landlock},
		{"seccomp", iso.Seccomp}, {"ipc", iso.IPC}, {"keys", iso.Keys}, {"descriptors", iso.FDs},
		{"quota", iso.Quota}, {"tree", iso.Tree}, {"rlimits", iso.Rlimits}, {"memory", iso.Memory},
	} {
		if strings.HasPrefix(t.v, "off") {
			off = append(off, t.name)
		}
	}
	return off
}
