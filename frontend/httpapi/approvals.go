package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/record"
)

// Approval is an approval as GET /v1/approvals/{id} shows it: the view
// `approve show -json` prints too.
type Approval = approve.View

// ApprovalSummary is an approval as GET /v1/approvals lists it: the
// summary `approve list -json` prints too.
type ApprovalSummary = approve.Summary

// ApprovalList is the answer to GET /v1/approvals.
type ApprovalList struct {
	Approvals []ApprovalSummary `json:"approvals"`
}

// Decision is the body of POST /v1/approvals/{id}/accept and reject.
type Decision struct {
	// By is a display note only: who decides is always the token's name
	// (decided_by). A By other than the token's name is kept beside it as
	// the approval's by_note, at most maxByNote bytes.
	By string `json:"by,omitempty"`
	// Comment says why: optional to accept, required to reject.
	Comment string `json:"comment,omitempty"`
}

// Limits of GET /v1/approvals.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
	// maxByNote bounds a decision's by, kept as a display note.
	maxByNote = 256
)

// approvalError answers an error of the approval store, with the message
// of `approve` (without its "approve: " prefix).
func (h *Handler) approvalError(w http.ResponseWriter, r *http.Request, err error) {
	msg := strings.TrimPrefix(err.Error(), "approve: ")
	var de *approve.DecidedError
	switch {
	case errors.As(err, &de):
		p := &Problem{Type: ProblemAlreadyDecided, Status: http.StatusConflict, Title: "Already decided",
			State: string(de.State), DecidedBy: de.By, Detail: msg}
		if !de.At.IsZero() {
			at := de.At.UTC()
			p.DecidedAt = &at
		}
		h.fail(w, r, p)
	case errors.Is(err, approve.ErrNotFound):
		h.fail(w, r, &Problem{Type: ProblemNotFound, Status: http.StatusNotFound, Detail: msg})
	case errors.Is(err, approve.ErrCommentRequired):
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "comment", Detail: msg})
	default:
		h.internal(w, r, err)
	}
}

// listApprovals serves GET /v1/approvals?state=&limit=.
func (h *Handler) listApprovals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := approve.State(q.Get("state"))
	switch state {
	case "":
		state = approve.StatePending
	case approve.StatePending, approve.StateAccepted, approve.StateRejected, approve.StateExpired, approve.StateAll:
	default:
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "state",
			Detail: fmt.Sprintf("state: unknown state %q: want pending, accepted, rejected, expired or all", state)})
		return
	}
	limit := defaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "limit",
				Detail: fmt.Sprintf("limit: %q: want a number from 1 to %d", s, maxListLimit)})
			return
		}
		limit = n
	}
	as, err := h.listFor(r.Context(), tokenOf(r), state, limit)
	if err != nil {
		h.approvalError(w, r, err)
		return
	}
	out := ApprovalList{Approvals: make([]ApprovalSummary, len(as))}
	for i, a := range as {
		out.Approvals[i] = a.Summary()
	}
	writeJSON(w, http.StatusOK, out)
}

// getApproval serves GET /v1/approvals/{id}.
func (h *Handler) getApproval(w http.ResponseWriter, r *http.Request) {
	a, err := h.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		h.approvalError(w, r, err)
		return
	}
	if !h.allowApproval(w, r, a) {
		return
	}
	writeJSON(w, http.StatusOK, a.View())
}

// approvalHistory serves GET /v1/approvals/{id}/history.
func (h *Handler) approvalHistory(w http.ResponseWriter, r *http.Request) {
	if !h.checkApproval(w, r, r.PathValue("id")) {
		return
	}
	hist, err := h.store.History(r.Context(), r.PathValue("id"))
	if err != nil {
		h.approvalError(w, r, err)
		return
	}
	if hist == nil {
		hist = []approve.Event{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"history": hist})
}

// approvalArtifact serves GET /v1/approvals/{id}/artifacts/{name...}: the
// staged bytes of one artifact, as an attachment.
func (h *Handler) approvalArtifact(w http.ResponseWriter, r *http.Request) {
	a, art, ok := h.findArtifact(w, r)
	if !ok {
		return
	}
	b, err := h.store.Data(r.Context(), a.ID, art.Name)
	if err != nil {
		h.approvalError(w, r, err)
		return
	}
	writeArtifact(w, r, art, "application/octet-stream", b)
}

// findArtifact reads the approval and the artifact r's path names, which
// r's token must be allowed to see; it answers the errors itself.
func (h *Handler) findArtifact(w http.ResponseWriter, r *http.Request) (*approve.Approval, *record.Artifact, bool) {
	id, name := r.PathValue("id"), r.PathValue("name")
	a, err := h.store.Get(r.Context(), id)
	if err != nil {
		h.approvalError(w, r, err)
		return nil, nil, false
	}
	if !h.allowApproval(w, r, a) {
		return nil, nil, false
	}
	for i := range a.Artifacts {
		if a.Artifacts[i].Name == name {
			return a, &a.Artifacts[i], true
		}
	}
	h.fail(w, r, &Problem{Type: ProblemNotFound, Status: http.StatusNotFound, Field: "name",
		Detail: fmt.Sprintf("approval %s has no artifact %q", id, name)})
	return nil, nil, false
}

func lastElem(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// readDecision reads the body of an accept or reject (optional for an
// accept, JSON with only by and comment) and checks that the token may
// decide the approval (its queue). Who decides is the token's name; a
// body's by other than it is the decision's display note.
func (h *Handler) readDecision(w http.ResponseWriter, r *http.Request) (approve.Decision, bool) {
	var d Decision
	b, ok := h.readBody(w, r, maxDecisionBody, "body", func(max int64) string {
		return fmt.Sprintf("the body is more than %d bytes", max)
	})
	if !ok {
		return approve.Decision{}, false
	}
	if len(bytes.TrimSpace(b)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			field := "body"
			msg := strings.TrimPrefix(err.Error(), "json: ")
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				field, msg = te.Field, "want a string"
			} else if f, found := strings.CutPrefix(msg, "unknown field "); found {
				field, msg = strings.Trim(f, `"`), "unknown field (known: by, comment)"
			}
			h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: field, Detail: field + ": " + msg})
			return approve.Decision{}, false
		}
	}
	out := approve.Decision{By: tokenOf(r).Name, Comment: d.Comment}
	if note := strings.TrimSpace(d.By); note != out.By {
		if len(note) > maxByNote {
			h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "by",
				Detail: fmt.Sprintf("by: %d bytes, at most %d (it is a display note: who decides is the token's name, %s)", len(note), maxByNote, out.By)})
			return approve.Decision{}, false
		}
		out.ByNote = note
	}
	return out, h.checkApproval(w, r, r.PathValue("id"))
}

// accept serves POST /v1/approvals/{id}/accept: approve.Accept, as
// `approve accept` does.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request) {
	d, ok := h.readDecision(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	a, warn, err := approve.AcceptDecision(r.Context(), h.store, h.promotions, id, d)
	if warn != nil {
		h.log.Warn().Str("approval_id", id).Err(warn).Msg("accept")
	}
	if a == nil {
		h.approvalError(w, r, err)
		return
	}
	if err != nil {
		h.fail(w, r, &Problem{Type: ProblemPromotionNotQueue, Status: http.StatusInternalServerError,
			State: string(a.State), DecidedBy: a.DecidedBy, Detail: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, a.View())
}

// reject serves POST /v1/approvals/{id}/reject.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request) {
	d, ok := h.readDecision(w, r)
	if !ok {
		return
	}
	if strings.TrimSpace(d.Comment) == "" {
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "comment",
			Detail: "comment is required: say why it is rejected"})
		return
	}
	a, err := h.store.Decide(r.Context(), r.PathValue("id"), approve.StateRejected, d)
	if a == nil {
		h.approvalError(w, r, err)
		return
	}
	if err != nil {
		h.log.Warn().Str("approval_id", a.ID).Err(err).Msg("reject")
	}
	writeJSON(w, http.StatusOK, a.View())
}
