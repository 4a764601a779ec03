// Package promote holds the stores that approved output is published to,
// as litestream keeps its backends: FS, a directory (this file), s3store,
// an S3 bucket, and storage.Open, which opens either from a URL and reads
// a publication back (Reader). Each store implements approve.Sink: package
// approve owns every transition of an approval, promotion included, and
// publishes through the Sink it is given; a store only writes a run's
// files and manifest, all at once or not at all, exactly once per
// approval.
package promote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/tasks"
)

// Reader reads a file of a publication back from where its store said it
// is (approve.Sink's Where): at most max bytes, a larger file being an
// error, and a missing one an error matching fs.ErrNotExist. A reader
// reads the manifest first: a run is published only once its manifest
// exists.
// Package storage has the Reader of both stores (directory and S3).
type Reader interface {
	ReadFile(ctx context.Context, where, name string, max int64) ([]byte, error)
}

// FS publishes into a directory, each task of a run under its own name:
// <dir>/<run_id>/<task_id>/ holds the task's result.json, its artifacts and
// manifest.json. Several tasks of one run (an agent's actions) all
// publish, side by side; a task that reuses another's run_id can neither
// block nor overwrite its publication.
//
// Every file is written into a staging directory of the call's own, the
// manifest last, then each file is fsynced, then each directory of the
// staging tree; then one rename(2) moves the staging directory to its
// place and the run's directory is fsynced (and the store directory
// before it, when the run's directory is new: an fsync that concurrent
// publications share, see groupSync). Each call stages in a directory of its
// own, so that two workers publishing one approval at once cannot mix
// their files: the first rename wins, whole, and the other finds it. A
// crash leaves at most a staging directory, which a later Publish removes
// once it is an hour old (one looks every ten minutes): readers never see a partial
// publication, and a retried promotion never a second one.
//
// The store is the worker's: directories are created 0700 and files 0600,
// or 0750 and 0640 with the group ReadGroup when it is set
// (-store-group), for the readers the operator names. The store directory
// itself is set so on first use.
type FS struct {
	Dir       string
	ReadGroup int // gid allowed to read the store; 0: none

	once     sync.Once
	rootErr  error
	rootSync groupSync // fsyncs of Dir, shared by concurrent publications

	sweepMu   sync.Mutex
	lastSweep time.Time // of the staging directory
}

// Where returns <dir>/<run_id>/<task_id>.
func (s *FS) Where(runID, taskID string) string { return filepath.Join(s.Dir, runID, taskID) }

func (s *FS) dirMode() os.FileMode {
	if s.ReadGroup > 0 {
		return 0o750
	}
	return 0o700
}

func (s *FS) fileMode() os.FileMode {
	if s.ReadGroup > 0 {
		return 0o640
	}
	return 0o600
}

// mkdir creates dir (not its parents) with the store's mode and group; it
// reports whether it created it.
func (s *FS) mkdir(dir string) (bool, error) {
	err := os.Mkdir(dir, s.dirMode())
	if err != nil && !errors.Is(err, os.ErrExist) {
		return false, err
	}
	return err == nil, s.own(dir, s.dirMode())
}

// own sets path's mode, and its group when the store has one. Without a
// group, a path that already has the mode is left alone: on a journaling
// filesystem each chmod is a metadata update, and a umask that strips no
// owner bit (the usual case) leaves nothing to change.
func (s *FS) own(path string, mode os.FileMode) error {
	if s.ReadGroup <= 0 {
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Perm() == mode {
			return nil
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	if s.ReadGroup > 0 {
		return os.Lchown(path, -1, s.ReadGroup)
	}
	return nil
}

// root creates the store directory, once, and sets its mode and group.
func (s *FS) root() error {
	s.once.Do(func() {
		if err := os.MkdirAll(s.Dir, s.dirMode()); err != nil {
			s.rootErr = err
			return
		}
		if s.rootErr = s.own(s.Dir, s.dirMode()); s.rootErr == nil {
			_, s.rootErr = s.mkdir(filepath.Join(s.Dir, ".staging"))
		}
	})
	return s.rootErr
}

// syncRoot fsyncs the store directory, sharing the fsync with concurrent
// publications (groupSync).
func (s *FS) syncRoot() error {
	return s.rootSync.sync(s.Dir)
}

// CheckName reports whether v, a publication's id (field names it:
// run_id, task_id, approval_id), can name one directory of a store: a
// clean relative path (tasks.CheckPath) of one component, with no
// backslash and no leading ".". Stores refuse to publish under another, and readers
// to look there (a forged record cannot lead them out of the store).
func CheckName(field, v string) error {
	if err := tasks.CheckPath(field, v); err != nil || strings.ContainsAny(v, "/\\") || strings.HasPrefix(v, ".") {
		return fmt.Errorf("promote: %s %q cannot name a directory of the store", field, v)
	}
	return nil
}

// Publish implements approve.Sink.
func (s *FS) Publish(ctx context.Context, m *approve.Manifest, files map[string][]byte) (bool, error) {
	for _, id := range []struct{ field, v string }{{"run_id", m.RunID}, {"task_id", m.TaskID}, {"approval_id", m.ApprovalID}} {
		if err := CheckName(id.field, id.v); err != nil {
			return false, err
		}
	}
	for name := range files {
		if name == "manifest.json" {
			return false, fmt.Errorf("promote: an artifact may not be named manifest.json")
		}
		if err := tasks.CheckPath("artifact", name); err != nil {
			return false, err
		}
	}
	if err := s.root(); err != nil {
		return false, err
	}
	runDir := filepath.Join(s.Dir, m.RunID)
	final := s.Where(m.RunID, m.TaskID)
	if done, err := s.already(final, m.ApprovalID); done || err != nil {
		return false, err
	}
	// The run's directory first: on a journaling filesystem its entry
	// can then go in the commit the files' fsyncs make, before the store
	// directory's fsync below asks for it.
	if _, err := s.mkdir(runDir); err != nil {
		return false, err
	}
	staging, err := s.stage(filepath.Join(s.Dir, ".staging"), m.ApprovalID)
	if err != nil {
		return false, err
	}
	renamed := false
	defer func() {
		if !renamed {
			os.RemoveAll(staging) // a failed or lost try leaves nothing behind
		}
	}()
	// The staging directory is this call's alone: files are written at
	// their names, all of them; then the writeback of each is started,
	// then each is fsynced, then each directory of the tree, so that a
	// journaling filesystem can carry several of them in one commit
	// (fewer device writes and flushes:
	// docs/benchmarks-history.md#what-paid-and-what-did-not).
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return false, err
	}
	// At most maxOpen files are held open: beyond, they are fsynced and
	// closed by batches.
	const maxOpen = 64
	written := make([]*os.File, 0, min(len(files)+1, maxOpen))
	defer func() {
		for _, f := range written {
			f.Close()
		}
	}()
	flush := func() error {
		for _, f := range written {
			startWriteback(f)
		}
		for _, f := range written {
			if err := f.Sync(); err != nil {
				return err
			}
		}
		var cerr error
		for _, f := range written {
			if err := f.Close(); err != nil && cerr == nil {
				cerr = err
			}
		}
		written = written[:0]
		return cerr
	}
	dirs := []string{staging}
	write := func(name string, data []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(written) == maxOpen {
			if err := flush(); err != nil {
				return err
			}
		}
		f, err := s.create(staging, filepath.Join(staging, name), &dirs)
		if err != nil {
			return err
		}
		written = append(written, f)
		_, err = f.Write(data)
		return err
	}
	for name, data := range files {
		if err := write(name, data); err != nil {
			return false, err
		}
	}
	if err := write("manifest.json", append(mb, '\n')); err != nil { // last
		return false, err
	}
	if err := flush(); err != nil {
		return false, err
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return false, err
		}
	}
	// Also when the run's directory existed: another publication (of
	// this worker or another) may have made it and not yet fsynced the
	// store directory. An fsync of a directory with nothing new is cheap,
	// and concurrent ones are shared.
	if err := s.syncRoot(); err != nil {
		return false, err
	}
	if err := os.Rename(staging, final); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, fs.ErrExist) {
			// Published meanwhile (or by an earlier try that crashed after
			// the rename): the manifest says by which approval.
			os.RemoveAll(staging)
			done, err := s.already(final, m.ApprovalID)
			if err == nil && !done {
				err = approve.ErrConflict
			}
			return false, err
		}
		return false, err
	}
	renamed = true
	return true, syncDir(runDir)
}

// staleStaging is the age past which a staging directory is a crashed
// try's: a promotion takes seconds (its task times out after 10 minutes).
// A publication looks for them every stagingSweepEvery.
const (
	staleStaging      = time.Hour
	stagingSweepEvery = 10 * time.Minute
)

// sweepDue reports whether this publication should look for crashed
// tries' staging directories (the first one of the process, then one
// every stagingSweepEvery), and notes that it does.
func (s *FS) sweepDue() bool {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if !s.lastSweep.IsZero() && time.Since(s.lastSweep) < stagingSweepEvery {
		return false
	}
	s.lastSweep = time.Now()
	return true
}

// sweepStaging removes the staging directories below root older than
// staleStaging: crashed tries'.
func (s *FS) sweepStaging(root string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleStaging {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}

// stage makes a staging directory of this call's own for approval id,
// <root>/<id>+<random>: two workers that publish one approval at once (a
// run's inline promotion and the promote task a sweeper queued for it)
// never write into, or remove, each other's files. Staging directories
// older than staleStaging, left by crashed tries, are removed when a
// sweep is due.
func (s *FS) stage(root, id string) (string, error) {
	if s.sweepDue() {
		s.sweepStaging(root)
	}
	dir, err := os.MkdirTemp(root, id+"+")
	if errors.Is(err, fs.ErrNotExist) {
		// The first publication (or the staging root was removed).
		if _, err = s.mkdir(root); err == nil {
			dir, err = os.MkdirTemp(root, id+"+")
		}
	}
	if err != nil {
		return "", err
	}
	if err := s.own(dir, s.dirMode()); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// already reports whether final holds the publication of approvalID; a
// publication of another approval is approve.ErrConflict.
func (s *FS) already(final, approvalID string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(final, "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(final); serr == nil {
			return false, fmt.Errorf("%w: %s exists without a manifest", approve.ErrConflict, final)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var old approve.Manifest
	if err := json.Unmarshal(b, &old); err != nil {
		return false, fmt.Errorf("promote: %s/manifest.json: %w", final, err)
	}
	if old.ApprovalID != approvalID {
		return false, fmt.Errorf("%w: %s holds approval %s", approve.ErrConflict, final, old.ApprovalID)
	}
	return true, nil
}

// create creates the file path, below staging (where no other call
// writes), with the store's mode and group; directories it makes on the
// way get the store's mode and are added to *dirs. The caller writes,
// fsyncs and closes the file.
func (s *FS) create(staging, path string, dirs *[]string) (*os.File, error) {
	if err := s.mkdirAll(staging, filepath.Dir(path), dirs); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) // O_EXCL: never through a symlink
	if err != nil {
		return nil, err
	}
	if s.ReadGroup <= 0 {
		if fi, err := f.Stat(); err == nil && fi.Mode().Perm() == s.fileMode() {
			return f, nil // the umask left the mode as it is meant to be
		}
	}
	err = f.Chmod(s.fileMode())
	if err == nil && s.ReadGroup > 0 {
		err = f.Chown(-1, s.ReadGroup)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// mkdirAll creates dir and its parents up to base (which exists), adding
// those it creates to *dirs.
func (s *FS) mkdirAll(base, dir string, dirs *[]string) error {
	if dir == base {
		return nil
	}
	if err := s.mkdirAll(base, filepath.Dir(dir), dirs); err != nil {
		return err
	}
	created, err := s.mkdir(dir)
	if created {
		*dirs = append(*dirs, dir)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
