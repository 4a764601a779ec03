package promote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/tasks"
	"golang.org/x/sys/unix"
)

// Manifest is the provenance of a publication, written last, as
// <run_id>/manifest.json.
type Manifest struct {
	RunID      string             `json:"run_id"`
	TaskID     string             `json:"task_id"`
	ApprovalID string             `json:"approval_id"`
	AcceptedBy string             `json:"accepted_by"` // a login, or "policy:<rule>" when auto-promoted
	AcceptedAt time.Time          `json:"accepted_at"`
	Comment    string             `json:"comment,omitempty"`
	Reasons    []string           `json:"reasons"`
	Result     *File              `json:"result,omitempty"`
	Artifacts  []File             `json:"artifacts"`
	Run        approve.RunSummary `json:"run"`
	PromotedAt time.Time          `json:"promoted_at"`
	PromotedBy string             `json:"promoted_by"` // worker and version
}

// File is one published file.
type File struct {
	Name        string `json:"name"`
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type,omitempty"`
}

// ResultName is where a run's JSON result is published.
const ResultName = "result.json"

// Sink is durable storage for promoted outputs. Publish makes a run's files
// and manifest visible all at once or not at all; publishing the same
// approval again changes nothing and reports published=false.
type Sink interface {
	Publish(ctx context.Context, m *Manifest, files map[string][]byte) (published bool, err error)
	// Where says where a run's output is published, for records and logs.
	Where(runID string) string
}

// ErrConflict is returned when a run's output was already published from
// another approval.
var ErrConflict = errors.New("run already published from another approval")

// FS publishes into a directory: <dir>/<run_id>/<artifact name>,
// <dir>/<run_id>/result.json and <dir>/<run_id>/manifest.json.
//
// Every file is written to a temp file, fsynced and renamed inside a
// staging directory, whose directory is fsynced; the manifest is written
// last; then one rename(2) moves the staging directory to <run_id> and the
// store directory is fsynced. A crash leaves at most a staging directory,
// which the next Publish of that approval replaces: readers never see a
// partial publication, and a retried promotion never a second one.
type FS struct {
	Dir string
}

// Where returns <dir>/<run_id>.
func (s *FS) Where(runID string) string { return filepath.Join(s.Dir, runID) }

// Publish implements Sink.
func (s *FS) Publish(ctx context.Context, m *Manifest, files map[string][]byte) (bool, error) {
	if err := tasks.CheckPath("run_id", m.RunID); err != nil || strings.Contains(m.RunID, "/") {
		return false, fmt.Errorf("promote: run_id %q cannot name a directory", m.RunID)
	}
	final := s.Where(m.RunID)
	if done, err := s.already(final, m.ApprovalID); done || err != nil {
		return false, err
	}
	staging := filepath.Join(s.Dir, ".staging", m.RunID+"."+m.ApprovalID)
	if err := os.RemoveAll(staging); err != nil {
		return false, err
	}
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return false, err
	}
	for name, data := range files {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if name == "manifest.json" {
			return false, fmt.Errorf("promote: an artifact may not be named manifest.json")
		}
		if err := tasks.CheckPath("artifact", name); err != nil {
			return false, err
		}
		if err := writeFileSync(filepath.Join(staging, name), data); err != nil {
			return false, err
		}
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return false, err
	}
	if err := writeFileSync(filepath.Join(staging, "manifest.json"), append(mb, '\n')); err != nil {
		return false, err
	}
	if err := syncTree(staging); err != nil {
		return false, err
	}
	if err := os.Rename(staging, final); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			// Published meanwhile (or by an earlier try that crashed after
			// the rename): the manifest says by which approval.
			os.RemoveAll(staging)
			done, err := s.already(final, m.ApprovalID)
			if err == nil && !done {
				err = ErrConflict
			}
			return false, err
		}
		return false, err
	}
	return true, syncDir(s.Dir)
}

// already reports whether final holds the publication of approvalID; a
// publication of another approval is ErrConflict.
func (s *FS) already(final, approvalID string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(final, "manifest.json"))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(final); serr == nil {
			return false, fmt.Errorf("%w: %s exists without a manifest", ErrConflict, final)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var old Manifest
	if err := json.Unmarshal(b, &old); err != nil {
		return false, fmt.Errorf("promote: %s/manifest.json: %w", final, err)
	}
	if old.ApprovalID != approvalID {
		return false, fmt.Errorf("%w: %s holds approval %s", ErrConflict, final, old.ApprovalID)
	}
	return true, nil
}

// writeFileSync writes path through a temp file: write, fsync, rename,
// fsync the directory.
func writeFileSync(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// syncTree fsyncs every directory below root, root included, so that the
// entries of directories MkdirAll created are durable too.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return syncDir(path)
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
