//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// transferMax bounds one upload or download, the slot it borrows
// included: a caller that trickles gives the slot back then.
const transferMax = 10 * time.Minute

// upload writes the file of an upload call from its transfer's chunks,
// within the workspace's quota, replacing what was at its path, never
// holding it whole.
func (w *Worker) upload(ctx context.Context, id string, ws *tmpfs.Workspace, call *session.Call) *session.Answer {
	defer w.sessions.Drop(context.WithoutCancel(ctx), id, call.Xfer)
	ctx, cancel := context.WithTimeout(ctx, transferMax) // a trickle holds the slot no longer
	defer cancel()
	if err := tasks.CheckPath("path", call.Path); err != nil {
		return &session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()}
	}
	n, err := ws.ReplaceStream(call.Path, w.sessions.Chunks(ctx, id, call.Xfer), -1)
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return &session.Answer{Status: http.StatusRequestEntityTooLarge, Field: "body", Error: "the workspace is full (limits.workspace)"}
	case err != nil:
		return &session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()}
	}
	return &session.Answer{Status: http.StatusOK, Size: n}
}

// download answers a download call with the file's size, then sends it
// in chunks, secrets redacted (a value cut between two chunks included).
// done: the answer was sent (and the file with it, or its abort).
func (w *Worker) download(ctx context.Context, id string, ws *tmpfs.Workspace, call *session.Call, sec *secrets.Set, answer func(*session.Answer) error) error {
	if err := tasks.CheckPath("path", call.Path); err != nil {
		return answer(&session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()})
	}
	f, size, err := ws.OpenRead(call.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return answer(&session.Answer{Status: http.StatusNotFound, Field: "path", Error: fmt.Sprintf("no file %s in the workspace", call.Path)})
	case err != nil:
		return answer(&session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()})
	}
	defer f.Close()
	if err := answer(&session.Answer{Status: http.StatusOK, Size: size}); err != nil {
		return err
	}
	var r io.Reader = io.LimitReader(f, size) // what it held when opened
	if !sec.Empty() {
		r = &redactReader{r: r, sec: sec}
	}
	ctx, cancel := context.WithTimeout(ctx, transferMax)
	defer cancel()
	if err := w.sessions.SendChunks(ctx, id, call.Xfer, r); err != nil {
		w.log.Warn().Err(err).Str("task_id", id).Str("path", call.Path).Msg("session download")
	}
	return nil
}

// redactReader is r with every secret's value redacted, a value cut
// between two reads included: it holds back the last Longest()-1 bytes
// read (more when a value straddles them) until the next read or the end.
type redactReader struct {
	r    io.Reader
	sec  *secrets.Set
	held []byte
	out  []byte
	eof  bool
}

func (d *redactReader) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.eof {
			return 0, io.EOF
		}
		buf := make([]byte, 64<<10)
		n, err := d.r.Read(buf)
		d.held = append(d.held, buf[:n]...)
		cut := len(d.held)
		if err == io.EOF {
			d.eof = true
		} else if err != nil {
			return 0, err
		} else {
			cut = d.sec.Straddle(d.held, len(d.held)-d.sec.Longest()+1)
		}
		if cut > 0 {
			d.out, _ = d.sec.RedactBytes(append([]byte(nil), d.held[:cut]...))
			d.held = append(d.held[:0:0], d.held[cut:]...)
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}
