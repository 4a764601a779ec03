//go:build linux

package worker

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tmpfs"
)

// A session's checkpoint is what it resumes from, on this worker or any
// other that shares the session store (Config.SessionStore): one file per
// committed call, <store>/<task id>.<seq>.ckpt, whose first line is the
// session's state (checkpointMeta, JSON) and the rest its workspace's
// archive (tmpfs.Workspace.Archive). A checkpoint counts once it is
// committed with its call's answer (session.Conn.Commit): the session's
// hash then names it, "<seq>:<sha256 of the file>", and a resume checks
// the digest while it restores. The file of the checkpoint before is
// removed once the next is committed, and the last one when the session
// ends.

// checkpointMeta is a session's state between two calls: what its record
// holds so far, and what its next call needs.
type checkpointMeta struct {
	Seq        int              `json:"seq"`
	StartedAt  time.Time        `json:"started_at"`
	Steps      []record.Step    `json:"steps"`
	Calls      int              `json:"calls"`
	EnvSecrets []string         `json:"env_secrets,omitempty"`
	KeepLeft   int64            `json:"keep_left"`
	IdleUntil  time.Time        `json:"idle_until"`
	Workspace  record.Workspace `json:"workspace"`
}

// maxCheckpointMeta bounds the state line a resume reads: a session's
// steps are bounded by its record's bound.
const maxCheckpointMeta = 16 << 20

// checkpointFile is the file of checkpoint seq of session id.
func (w *Worker) checkpointFile(id string, seq int) string {
	return filepath.Join(w.cfg.SessionStore, fmt.Sprintf("%s.%d.ckpt", id, seq))
}

// writeCheckpoint writes the checkpoint of meta and ws, at most max bytes
// of archive, and returns its name for the session's hash and its size.
func (w *Worker) writeCheckpoint(id string, meta *checkpointMeta, ws *tmpfs.Workspace, max int64) (name string, size int64, err error) {
	path := w.checkpointFile(id, meta.Seq)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 64<<10)
	line, err := json.Marshal(meta)
	if err == nil {
		_, err = bw.Write(append(line, '\n'))
	}
	if err == nil {
		_, _, err = ws.Archive(bw, max)
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	return strconv.Itoa(meta.Seq) + ":" + hex.EncodeToString(h.Sum(nil)), st.Size(), nil
}

// readCheckpointMeta reads the state of the committed checkpoint name of
// session id (its workspace is restored by restoreCheckpoint).
func (w *Worker) readCheckpointMeta(id, name string) (*checkpointMeta, error) {
	seq, _, err := parseCheckpoint(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(w.checkpointFile(id, seq))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w (the session store, -session-store, must be the one of the worker that held it)", name, err)
	}
	defer f.Close()
	line, err := bufio.NewReader(io.LimitReader(f, maxCheckpointMeta)).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	var m checkpointMeta
	if err := json.Unmarshal(line, &m); err != nil || m.Seq != seq {
		return nil, fmt.Errorf("checkpoint %s: its state does not read (%v)", name, err)
	}
	return &m, nil
}

// restoreCheckpoint restores the workspace of checkpoint name of session
// id into ws, checking the file's digest as it goes: a file that is not
// the one committed fails, whatever it restored.
func (w *Worker) restoreCheckpoint(id, name string, ws *tmpfs.Workspace) error {
	seq, digest, err := parseCheckpoint(name)
	if err != nil {
		return err
	}
	f, err := os.Open(w.checkpointFile(id, seq))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	r := bufio.NewReaderSize(io.TeeReader(f, h), 64<<10)
	if _, err := r.ReadBytes('\n'); err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	if _, _, err := ws.Restore(r); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil { // the tar's padding
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) != digest {
		return fmt.Errorf("checkpoint %s: the file in the store is not the one committed (digest differs)", name)
	}
	return nil
}

// parseCheckpoint splits a checkpoint's name, "<seq>:<sha256>".
func parseCheckpoint(name string) (int, string, error) {
	s, digest, ok := strings.Cut(name, ":")
	seq, err := strconv.Atoi(s)
	if !ok || err != nil || seq < 0 || len(digest) != 64 {
		return 0, "", fmt.Errorf("checkpoint %q: not a checkpoint's name", name)
	}
	return seq, digest, nil
}

// removeCheckpoint removes checkpoint seq of session id, if there.
func (w *Worker) removeCheckpoint(id string, seq int) {
	if err := os.Remove(w.checkpointFile(id, seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.log.Warn().Err(err).Str("task_id", id).Msg("remove a session's checkpoint")
	}
}

// sweepCheckpoints removes, at start, the checkpoints older than any
// session lives (-max-timeout) and its record's retention: what sessions
// that ended without their worker left.
func (w *Worker) sweepCheckpoints(olderThan time.Duration) {
	ents, err := os.ReadDir(w.cfg.SessionStore)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".ckpt") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > olderThan {
			os.Remove(filepath.Join(w.cfg.SessionStore, e.Name()))
		}
	}
}
