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

// checkpointRef is what a checkpoint's name says: "<seq>.<nonce>:<sha256
// of its file>", its file <store>/<task id>.<seq>.<nonce>.ckpt. The nonce
// is its writer's (Worker.holder's last part): two workers that hold the
// session one after the other (one of them cut off from Redis) never
// write or remove each other's file.
type checkpointRef struct {
	seq    int
	nonce  string
	digest string
}

// parseCheckpoint reads a checkpoint's name.
func parseCheckpoint(name string) (checkpointRef, error) {
	left, digest, ok := strings.Cut(name, ":")
	s, nonce, ok2 := strings.Cut(left, ".")
	seq, err := strconv.Atoi(s)
	if !ok || !ok2 || err != nil || seq < 0 || len(digest) != 64 || !validNonce(nonce) {
		return checkpointRef{}, fmt.Errorf("checkpoint %q: not a checkpoint's name", name)
	}
	return checkpointRef{seq: seq, nonce: nonce, digest: digest}, nil
}

func validNonce(n string) bool {
	return n != "" && len(n) <= 16 && strings.Trim(n, "0123456789abcdef") == ""
}

// file is the checkpoint's file for session id.
func (w *Worker) checkpointPath(id string, r checkpointRef) string {
	return filepath.Join(w.cfg.SessionStore, fmt.Sprintf("%s.%d.%s.ckpt", id, r.seq, r.nonce))
}

// nonce is this worker's part of its checkpoints' names.
func (w *Worker) nonce() string { return w.holder[strings.LastIndexByte(w.holder, '/')+1:] }

// writeCheckpoint writes the checkpoint of meta and ws, at most max bytes
// of archive, and returns its name for the session's hash and its size.
// It writes a new file of its own and renames it into place: nothing
// planted in the store is opened or followed.
func (w *Worker) writeCheckpoint(id string, meta *checkpointMeta, ws *tmpfs.Workspace, max int64) (name string, size int64, err error) {
	ref := checkpointRef{seq: meta.Seq, nonce: w.nonce()}
	path := w.checkpointPath(id, ref)
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
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
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return "", 0, err
	}
	return fmt.Sprintf("%d.%s:%s", ref.seq, ref.nonce, hex.EncodeToString(h.Sum(nil))), size, nil
}

// readCheckpointMeta reads the state of the committed checkpoint name of
// session id, after checking the whole file against its digest (its
// workspace is restored, call by call, by restoreCheckpoint), and the
// file's size.
func (w *Worker) readCheckpointMeta(id, name string) (*checkpointMeta, int64, error) {
	ref, err := parseCheckpoint(name)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(w.checkpointPath(id, ref))
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: %w (the session store, -session-store, must be the one of the worker that held it)", name, err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return nil, 0, err
	}
	if hex.EncodeToString(h.Sum(nil)) != ref.digest {
		return nil, 0, fmt.Errorf("checkpoint %s: the file in the store is not the one committed (digest differs)", name)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	line, err := bufio.NewReader(io.LimitReader(f, maxCheckpointMeta)).ReadBytes('\n')
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	var m checkpointMeta
	if err := json.Unmarshal(line, &m); err != nil || m.Seq != ref.seq {
		return nil, 0, fmt.Errorf("checkpoint %s: its state does not read (%v)", name, err)
	}
	return &m, size, nil
}

// restoreCheckpoint restores the workspace of checkpoint name of session
// id into ws, checking the file's digest as it goes: a file that is not
// the one committed fails, whatever it restored (the slot's workspace is
// emptied when the call gives it back).
func (w *Worker) restoreCheckpoint(id, name string, ws *tmpfs.Workspace) error {
	ref, err := parseCheckpoint(name)
	if err != nil {
		return err
	}
	f, err := os.Open(w.checkpointPath(id, ref))
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
	if hex.EncodeToString(h.Sum(nil)) != ref.digest {
		return fmt.Errorf("checkpoint %s: the file in the store is not the one committed (digest differs)", name)
	}
	return nil
}

// removeCheckpoint removes checkpoint name of session id, if there.
func (w *Worker) removeCheckpoint(id, name string) {
	ref, err := parseCheckpoint(name)
	if err != nil {
		return
	}
	if err := os.Remove(w.checkpointPath(id, ref)); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.log.Warn().Err(err).Str("task_id", id).Msg("remove a session's checkpoint")
	}
}

// openStore makes the session store (mode 0700, the worker's own) or
// checks the one there: a directory of another owner, or open to others,
// is refused (its checkpoints would be others' to read or plant).
func openStore(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: not a directory of this worker's user (uid %d)", dir, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return os.Chmod(dir, 0o700)
	}
	return nil
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
		if !strings.HasSuffix(e.Name(), ".ckpt") && !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > olderThan {
			os.Remove(filepath.Join(w.cfg.SessionStore, e.Name()))
		}
	}
}
