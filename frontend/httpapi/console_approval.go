package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/frontend/console"
	"github.com/airlock-run/airlock/record"
)

// Bounds of an approval's page.
const (
	// maxPreviewBytes: a larger artifact is a download only, and is not
	// compared with the last accepted one.
	maxPreviewBytes = 16 << 20
	// maxAcceptedScan is how many of the newest accepted approvals the
	// page looks at for the last accepted output of the same action.
	maxAcceptedScan = 1000
	// maxConsoleBytes bounds the artifact bytes the console's pages hold
	// at once, every token together; a token holds at most half.
	maxConsoleBytes = 128 << 20
)

// errTooLarge: an artifact larger than maxPreviewBytes, which the console
// does not read (a download only).
var errTooLarge = errors.New("more than the console reads")

// errBusy: the artifact bytes the console's pages hold at once are at
// their bound (maxConsoleBytes), or the token's share.
var errBusy = errors.New("the API holds as many artifact bytes for the console's pages as it may at once: reload shortly")

// ConsoleApproval is the answer to GET /ui/api/approvals/{id}: the
// approval as the API shows it, and what the console renders of it.
type ConsoleApproval struct {
	Approval Approval `json:"approval"`
	// ResultNote says why the result is shown as its text: it nests
	// deeper than console.MaxTreeDepth.
	ResultNote string `json:"result_note,omitempty"`
	// Highlights are the values of the result the policy's rules looked
	// at, as the worker's policy recorded them (the approval's checked).
	Highlights []console.Highlight `json:"highlights"`
	// Previews are the artifacts', in the approval's order.
	Previews []console.Preview `json:"previews"`
	// Run is what the run record says of the steps and egress.
	Run ConsoleRun `json:"run"`
	// Diff is the change since the last accepted output of the same
	// action (or run id).
	Diff ConsoleDiff `json:"diff"`
}

// ConsoleRun is what an approval's page shows of the run's record: its
// steps with the output kept, and its egress. Note says why they are
// missing (a record past its retention).
type ConsoleRun struct {
	Steps  []record.Step   `json:"steps"`
	Egress []record.Egress `json:"egress"`
	Note   string          `json:"note,omitempty"`
}

// ConsoleDiff is how an approval's output differs from the last accepted
// output of the same action, or, for a free-form spec, of the same run
// id.
type ConsoleDiff struct {
	// Against is the approval compared with; nil when there is none.
	Against *DiffBase `json:"against"`
	// Basis says what was matched: "action NAME in queue Q" or "run_id
	// ID of PRINCIPAL in queue Q".
	Basis string              `json:"basis"`
	Note  string              `json:"note,omitempty"`
	Keys  []console.KeyChange `json:"keys"`
	// KeysCut: more values changed than Keys lists.
	KeysCut bool `json:"keys_cut,omitempty"`
	// KeysNote says what of the results was not compared (a result past
	// the diff's bounds): Keys is then no proof that nothing else changed.
	KeysNote  string              `json:"keys_note,omitempty"`
	Artifacts []console.TableDiff `json:"artifacts"`
}

// DiffBase names the accepted approval a diff compares with.
type DiffBase struct {
	ID        string    `json:"id"`
	TaskID    string    `json:"task_id"`
	Queue     string    `json:"queue"`
	Principal string    `json:"principal,omitempty"`
	DecidedBy string    `json:"decided_by"`
	DecidedAt time.Time `json:"decided_at"`
}

// consoleApproval serves GET /ui/api/approvals/{id}.
func (h *Handler) consoleApproval(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a, err := h.store.Get(ctx, r.PathValue("id"))
	if err != nil {
		h.approvalError(w, r, err)
		return
	}
	if !h.allowApproval(w, r, a) {
		return
	}
	out := ConsoleApproval{Approval: a.View(), Highlights: console.Highlights(a.Checked, a.Reasons), Previews: []console.Preview{}}
	if d := console.Depth(a.Result); d > console.MaxTreeDepth {
		text, _ := console.Clip(string(a.Result), console.MaxText)
		out.Approval.Result = text
		out.ResultNote = fmt.Sprintf("the result nests %d levels deep, more than the %d the page shows as a tree: here is its text (the first %d bytes)", d, console.MaxTreeDepth, console.MaxText)
	}
	for _, art := range a.Artifacts {
		out.Previews = append(out.Previews, h.preview(ctx, tokenOf(r), a, art))
	}
	out.Run = h.consoleRun(ctx, a)
	out.Diff = h.consoleDiff(ctx, tokenOf(r), a)
	writeJSON(w, http.StatusOK, out)
}

// artifactBytes returns the bytes of artifact art of approval a: staged
// with it while it waits, published once promoted.
// The caller holds art.Bytes of the console's bytes (holdBytes).
func (h *Handler) artifactBytes(ctx context.Context, a *approve.Approval, art record.Artifact) ([]byte, error) {
	if art.Bytes > maxPreviewBytes {
		return nil, fmt.Errorf("%d bytes: %w (%d)", art.Bytes, errTooLarge, maxPreviewBytes)
	}
	b, err := h.store.Data(ctx, a.ID, art.Name)
	if errors.Is(err, approve.ErrNotFound) && !a.PromotedAt.IsZero() {
		b, err = h.client.PublishedArtifact(ctx, approvalQueue(a), a.TaskID, art.Name, maxPreviewBytes)
	}
	return b, err
}

// holdBytes counts n bytes as held by t's console page until release, or
// says errBusy.
func (h *Handler) holdBytes(t *Token, n int64) (release func(), err error) {
	if n > maxPreviewBytes {
		return func() {}, nil // not read: artifactBytes refuses it
	}
	if h.consoleBytes.take(t.Name, n, 0) != shareOK {
		return nil, errBusy
	}
	return func() { h.consoleBytes.give(t.Name, n) }, nil
}

// preview is what the page shows of artifact art.
func (h *Handler) preview(ctx context.Context, t *Token, a *approve.Approval, art record.Artifact) console.Preview {
	release, err := h.holdBytes(t, art.Bytes)
	var b []byte
	if err == nil {
		defer release()
		b, err = h.artifactBytes(ctx, a, art)
	}
	var p console.Preview
	if err != nil {
		p = console.Preview{Kind: console.KindDownload, Note: "no preview: " + readError(err)}
	} else {
		p = console.NewPreview(art.Name, art.ContentType, b)
	}
	p.Name, p.Bytes, p.SHA256, p.ContentType = art.Name, art.Bytes, art.SHA256, art.ContentType
	return p
}

// readError says why bytes could not be read, without the store's paths.
func readError(err error) string {
	switch {
	case errors.Is(err, approve.ErrNotFound):
		return "its bytes are no longer kept"
	case errors.Is(err, errBusy) || errors.Is(err, errTooLarge):
		return err.Error()
	}
	return "its bytes could not be read (the API's store: api -store)"
}

// consoleRun reads the run's record for its steps and egress.
func (h *Handler) consoleRun(ctx context.Context, a *approve.Approval) ConsoleRun {
	rec, err := h.client.Status(ctx, approvalQueue(a), a.TaskID)
	if err != nil || rec.RunID != a.RunID {
		return ConsoleRun{Steps: []record.Step{}, Egress: []record.Egress{},
			Note: "the run's record is no longer kept: its steps' output and egress are not shown"}
	}
	out := ConsoleRun{Steps: rec.Steps, Egress: rec.Egress}
	if out.Steps == nil {
		out.Steps = []record.Step{}
	}
	if out.Egress == nil {
		out.Egress = []record.Egress{}
	}
	return out
}

// consoleDiff compares a's output with the last accepted output of the
// same action in the same queue (a catalog is its queue's workers'), or,
// for a free-form spec, of the same run id, queue and principal (a run id
// is the caller's word): accepted before a was decided, when it was.
func (h *Handler) consoleDiff(ctx context.Context, t *Token, a *approve.Approval) ConsoleDiff {
	d := ConsoleDiff{Keys: []console.KeyChange{}, Artifacts: []console.TableDiff{}}
	queue := approvalQueue(a)
	same := func(o *approve.Approval) bool { return o.RunID == a.RunID && o.Run.Principal == a.Run.Principal }
	d.Basis = fmt.Sprintf("run_id %s of %s in queue %s", a.RunID, a.Run.Principal, queue)
	if a.Run.Action != "" {
		d.Basis = fmt.Sprintf("action %s in queue %s", a.Run.Action, queue)
		same = func(o *approve.Approval) bool { return o.Run.Action == a.Run.Action }
	}
	prevs, _, err := h.store.Scan(ctx, approve.StateAccepted, 0, 1, maxAcceptedScan, func(o *approve.Approval) bool {
		return o.ID != a.ID && approvalQueue(o) == queue && t.AllowsQueue(queue) && same(o) &&
			(a.State == approve.StatePending || o.DecidedAt.Before(a.DecidedAt))
	})
	if err != nil {
		d.Note = "the accepted approvals could not be read"
		return d
	}
	if len(prevs) == 0 {
		d.Note = fmt.Sprintf("no earlier accepted output of %s among the %d newest accepted", d.Basis, maxAcceptedScan)
		return d
	}
	prev, err := h.store.Get(ctx, prevs[0].ID)
	if err != nil {
		d.Note = "the last accepted approval " + prevs[0].ID + " could not be read"
		return d
	}
	d.Against = &DiffBase{ID: prev.ID, TaskID: prev.TaskID, Queue: approvalQueue(prev), Principal: prev.Run.Principal,
		DecidedBy: prev.DecidedBy, DecidedAt: prev.DecidedAt}
	rd := console.DiffResult(prev.Result, a.Result)
	d.KeysCut, d.KeysNote = rd.Cut, rd.Note
	if rd.Keys != nil {
		d.Keys = rd.Keys
	}
	before := map[string]record.Artifact{}
	for _, art := range prev.Artifacts {
		before[art.Name] = art
	}
	for _, art := range a.Artifacts {
		old, ok := before[art.Name]
		delete(before, art.Name)
		switch {
		case !ok:
			d.Artifacts = append(d.Artifacts, console.TableDiff{Name: art.Name, Change: console.Added})
		case old.SHA256 == art.SHA256:
			d.Artifacts = append(d.Artifacts, console.TableDiff{Name: art.Name, Change: console.Same})
		default:
			d.Artifacts = append(d.Artifacts, h.diffArtifact(ctx, t, prev, old, a, art))
		}
	}
	for _, art := range prev.Artifacts {
		if _, gone := before[art.Name]; gone {
			d.Artifacts = append(d.Artifacts, console.TableDiff{Name: art.Name, Change: console.Removed})
		}
	}
	return d
}

// diffArtifact compares two versions of a table artifact row by row; any
// other artifact is only said to have changed.
func (h *Handler) diffArtifact(ctx context.Context, t *Token, prev *approve.Approval, old record.Artifact, a *approve.Approval, art record.Artifact) console.TableDiff {
	changed := console.TableDiff{Name: art.Name, Change: console.Changed}
	sep := console.Separator(art.Name, art.ContentType)
	if sep == 0 {
		changed.Note = "not a table: its bytes differ"
		return changed
	}
	release, err := h.holdBytes(t, old.Bytes+art.Bytes)
	if err != nil {
		changed.Note = "not compared: " + err.Error()
		return changed
	}
	defer release()
	ob, err := h.artifactBytes(ctx, prev, old)
	if err != nil {
		changed.Note = "the accepted version: " + readError(err)
		return changed
	}
	nb, err := h.artifactBytes(ctx, a, art)
	if err != nil {
		changed.Note = "this version: " + readError(err)
		return changed
	}
	return console.DiffTable(art.Name, ob, nb, sep)
}

// consoleArtifact serves GET /ui/api/approvals/{id}/artifacts/{name...}:
// the artifact's bytes as an attachment, typed by the console (a raster
// image by its bytes, anything else application/octet-stream), never as
// the run declared it.
func (h *Handler) consoleArtifact(w http.ResponseWriter, r *http.Request) {
	a, art, ok := h.findArtifact(w, r)
	if !ok {
		return
	}
	release, err := h.holdBytes(tokenOf(r), art.Bytes)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable, Detail: err.Error()})
		return
	}
	defer release()
	b, err := h.artifactBytes(r.Context(), a, *art)
	if err != nil {
		h.fail(w, r, &Problem{Type: ProblemNotFound, Status: http.StatusNotFound, Field: "name",
			Detail: fmt.Sprintf("artifact %q of approval %s: %s", art.Name, a.ID, readError(err))})
		return
	}
	ct := console.ImageType(b)
	if ct == "" {
		ct = "application/octet-stream"
	}
	writeArtifact(w, r, art, ct, b)
}

// writeArtifact writes b, artifact art, as an attachment of type ct.
func writeArtifact(w http.ResponseWriter, r *http.Request, art *record.Artifact, ct string, b []byte) {
	hd := w.Header()
	hd.Set("Content-Type", ct)
	hd.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", strings.ReplaceAll(lastElem(art.Name), `"`, "_")))
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Airlock-Content-Type", art.ContentType)
	hd.Set("X-Airlock-Sha256", art.SHA256)
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
