package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// Enqueued is the answer to POST /v1/runs: what `enqueue -json` prints.
type Enqueued struct {
	TaskID    string `json:"task_id"`
	Queue     string `json:"queue"`
	RunID     string `json:"run_id"`
	Duplicate bool   `json:"duplicate"`
}

// Published is the answer to GET /v1/runs/{task_id}/result: what
// `enqueue -result` prints.
type Published struct {
	Where    string          `json:"where"`
	Manifest any             `json:"manifest"`
	Result   json.RawMessage `json:"result"`
}

var queueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, nil, &Problem{Type: ProblemInternal, Status: http.StatusInternalServerError, Detail: err.Error()})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// isJSON reports whether a Content-Type is application/json (or a
// +json type).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// readBody reads r's JSON body, at most max bytes; it answers 415 to a
// body that is not JSON, and readAll's errors (413 above max, 503 past
// the bytes in flight), naming field, and returns false then.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, max int64, field string, tooLarge func(n int64) string) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) && (ct != "" || r.ContentLength != 0) {
		h.fail(w, r, &Problem{Type: ProblemUnsupportedType, Status: http.StatusUnsupportedMediaType, Field: "Content-Type",
			Detail: fmt.Sprintf("Content-Type %q: send application/json", ct)})
		return nil, false
	}
	return h.readAll(w, r, max, field, tooLarge)
}

// specRejected answers a spec the decoder or the client rejected, with the
// message of `enqueue`.
func (h *Handler) specRejected(w http.ResponseWriter, r *http.Request, fe *tasks.FieldError) {
	h.fail(w, r, &Problem{Type: ProblemSpecRejected, Status: http.StatusBadRequest, Title: "Spec rejected",
		Field: fe.Field, Hint: fe.Hint, Detail: fmt.Sprintf("spec rejected: %s", fe.Error())})
}

// enqueue serves POST /v1/runs.
func (h *Handler) enqueue(w http.ResponseWriter, r *http.Request) {
	if spec, ok := h.readSpec(w, r); ok {
		h.enqueueSpec(w, r, spec)
	}
}

// readSpec reads the request's body, a spec at most the payload cap, and
// decodes it strictly; it answers the errors itself and returns false then.
func (h *Handler) readSpec(w http.ResponseWriter, r *http.Request) (*tasks.Spec, bool) {
	data, ok := h.readBody(w, r, int64(h.maxPayload), "spec", func(max int64) string {
		return fmt.Sprintf("spec rejected: spec: the body is more than %d bytes, the payload cap (inline files and stdin are for small inputs; larger data comes by inputs)", max)
	})
	if !ok {
		return nil, false
	}
	return h.decodeSpec(w, r, data)
}

// decodeSpec decodes a spec strictly, or answers 400 naming the field and
// returns false.
func (h *Handler) decodeSpec(w http.ResponseWriter, r *http.Request, data []byte) (*tasks.Spec, bool) {
	spec, err := tasks.Decode(data)
	var fe *tasks.FieldError
	if errors.As(err, &fe) {
		h.specRejected(w, r, fe)
		return nil, false
	}
	if err != nil {
		h.fail(w, r, &Problem{Type: ProblemSpecRejected, Status: http.StatusBadRequest, Field: "spec", Detail: "spec rejected: " + err.Error()})
		return nil, false
	}
	return spec, true
}

// catalogHints say, in the hints of a call the catalog refuses, how the
// API's client sees the catalog.
var catalogHints = airlock.CatalogHints{
	Actions: "GET /v1/actions?queue=Q lists them",
	Params:  "GET /v1/actions?queue=Q shows each action's params schema",
}

// enqueueSpec admits a decoded spec for the request's token, enqueues it
// and answers.
func (h *Handler) enqueueSpec(w http.ResponseWriter, r *http.Request, spec *tasks.Spec) {
	var fe *tasks.FieldError
	if !h.admit(w, r, spec) {
		return
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if spec.IdempotencyKey != "" && spec.IdempotencyKey != key {
			h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "Idempotency-Key",
				Detail: fmt.Sprintf("the Idempotency-Key header (%q) and the spec's idempotency_key (%q) differ: send one of them, or the same", key, spec.IdempotencyKey)})
			return
		}
		spec.IdempotencyKey = key
	}
	e, err := h.client.Enqueue(r.Context(), spec)
	err = catalogHints.Rehint(err)
	if tasks.IsInvalid(err) && errors.As(err, &fe) {
		if fe.Field == "idempotency_key" && r.Header.Get("Idempotency-Key") != "" {
			fe = &tasks.FieldError{Field: "Idempotency-Key", Msg: fe.Msg, Hint: fe.Hint}
		}
		h.specRejected(w, r, fe)
		return
	}
	if err != nil {
		h.internal(w, r, err)
		return
	}
	status := http.StatusCreated
	if e.Duplicate {
		status = http.StatusOK
	}
	w.Header().Set("Location", runPath(e.TaskID, e.Queue))
	writeJSON(w, status, Enqueued{TaskID: e.TaskID, Queue: e.Queue, RunID: e.RunID, Duplicate: e.Duplicate})
}

// runPath is the URL path of a run.
func runPath(taskID, queue string) string {
	return "/v1/runs/" + url.PathEscape(taskID) + "?queue=" + url.QueryEscape(queue)
}

// queueOf returns the queue of the request's task: the queue parameter, or
// the one queue that holds it (among the token's, for a token bound to
// queues). It answers the errors itself and returns false then.
func (h *Handler) queueOf(w http.ResponseWriter, r *http.Request, taskID string) (string, bool) {
	if q := r.URL.Query().Get("queue"); q != "" {
		if !queueRE.MatchString(q) {
			h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "queue",
				Detail: "queue: must be 1-64 characters of letters, digits, '_' or '-'"})
			return "", false
		}
		return q, h.allowQueue(w, r, "queue", q)
	}
	q, err := h.locate(r.Context(), tokenOf(r), taskID)
	if err != nil {
		h.runError(w, r, taskID, err)
		return "", false
	}
	return q, true
}

// runError answers an error of the client about task taskID.
func (h *Handler) runError(w http.ResponseWriter, r *http.Request, taskID string, err error) {
	var np *airlock.NotPromotedError
	switch {
	case errors.Is(err, airlock.ErrNotFound):
		h.fail(w, r, &Problem{Type: ProblemNotFound, Status: http.StatusNotFound, TaskID: taskID, Detail: err.Error()})
	case errors.As(err, &np):
		h.fail(w, r, &Problem{Type: ProblemNotPromoted, Status: http.StatusConflict, Title: "Not promoted",
			TaskID: taskID, State: string(np.State), Detail: err.Error()})
	case errors.Is(err, airlock.ErrAmbiguous):
		h.fail(w, r, &Problem{Type: ProblemAmbiguousTask, Status: http.StatusConflict, Field: "queue", TaskID: taskID,
			Detail: err.Error() + " (pass ?queue=)"})
	default:
		h.internal(w, r, err)
	}
}

// parseWait reads the wait and until parameters: how long to wait (0: do
// not), and whether through the approval.
func parseWait(q url.Values) (time.Duration, bool, *Problem) {
	var d time.Duration
	if s := q.Get("wait"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxWait {
			return 0, false, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "wait",
				Detail: fmt.Sprintf("wait: %q is not a duration between 0s and %s (Go syntax, such as 30s)", s, MaxWait)}
		}
	}
	switch u := q.Get("until"); u {
	case "", "done":
		return d, false, nil
	case "final":
		return d, true, nil
	default:
		return 0, false, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "until",
			Detail: fmt.Sprintf("until: %q: want done (parked or finished) or final (through the approval)", u)}
	}
}

// getRun serves GET /v1/runs/{task_id}, with ?wait= a long poll, of a run
// the token may read (reads.go): another's is 404 at once, never waited
// for.
func (h *Handler) getRun(w http.ResponseWriter, r *http.Request) {
	taskID := r.PathValue("task_id")
	wait, final, p := parseWait(r.URL.Query())
	if p != nil {
		h.fail(w, r, p)
		return
	}
	queue, ok := h.queueOf(w, r, taskID)
	if !ok {
		return
	}
	if wait == 0 {
		// Whose it is, before anything of it shows (reads.go).
		if rec, ok := h.readRun(r.Context(), w, r, queue, taskID); ok {
			writeJSON(w, http.StatusOK, rec)
		}
		return
	}
	ctx, cancel := h.bounded(r.Context(), wait)
	defer cancel()
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	// The run is read once: whose it is, before anything of it shows or
	// a waiter is held (reads.go), then waited for from that read.
	rec, err := h.client.WaitWith(ctx, queue, taskID, final, func(rec *record.Run) error {
		if !tokenOf(r).MayRead(rec.Principal) {
			return unknownRun(r, queue, taskID)
		}
		var ok bool
		if release, ok = h.holdWaiter(w, r, queue); !ok {
			return errAnswered
		}
		return nil
	})
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, rec)
	case errors.Is(err, errAnswered), r.Context().Err() != nil:
		// Answered, or the client went away.
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The wait is over (or the server stops): the run as it is, for
		// a token that may read it.
		if rec, ok := h.readRun(r.Context(), w, r, queue, taskID); ok {
			writeJSON(w, http.StatusOK, rec)
		}
	default:
		h.runError(w, r, taskID, err)
	}
}

// errAnswered is the error of a check that answered the request itself.
var errAnswered = errors.New("httpapi: answered")

// bounded returns ctx, ended after d or when the handler closes.
func (h *Handler) bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, d)
	stop := context.AfterFunc(h.stopCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// runResult serves GET /v1/runs/{task_id}/result: the run is located as
// for GET /v1/runs/{task_id}, and must be one the token may read.
func (h *Handler) runResult(w http.ResponseWriter, r *http.Request) {
	taskID := r.PathValue("task_id")
	queue, ok := h.queueOf(w, r, taskID)
	if !ok {
		return
	}
	if _, ok := h.readRun(r.Context(), w, r, queue, taskID); !ok {
		return
	}
	p, err := h.client.ResultIn(r.Context(), queue, taskID)
	if err != nil {
		h.runError(w, r, taskID, err)
		return
	}
	writeJSON(w, http.StatusOK, Published{Where: p.Where, Manifest: p.Manifest, Result: resultOrNull(p.Result)})
}

func resultOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
