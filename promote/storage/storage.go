// Package storage opens the store promoted outputs are published to from
// its location (the worker's -store value), and reads publications back
// from where a store said it put them (a record's published_to).
//
// A location is a directory, the filesystem store (promote.FS), or
// s3://bucket/prefix, an S3-compatible object store (s3store.Store)
// configured from the usual AWS environment variables.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/promote/s3store"
)

// Options are the settings of a store beyond its location.
type Options struct {
	// ReadGroup is the gid allowed to read a filesystem store (0: none);
	// it has no meaning for S3, where Open refuses it.
	ReadGroup int
}

// IsS3 reports whether location names an S3 store or publication.
func IsS3(location string) bool { return strings.HasPrefix(location, s3store.Scheme) }

// Open returns the store at location: a directory (created on first
// publication), or s3://bucket/prefix, whose client is configured from
// the environment (s3store.NewClient) and whose bucket Open checks it can
// reach.
func Open(ctx context.Context, location string, o Options) (approve.Sink, error) {
	switch {
	case location == "":
		return nil, errors.New("empty: want a directory or s3://bucket/prefix")
	case IsS3(location):
		if o.ReadGroup > 0 {
			return nil, fmt.Errorf("%s: a read group is for a directory store; give S3 readers access with the bucket's own policy", location)
		}
		bucket, prefix, err := s3store.ParseURL(location)
		if err != nil {
			return nil, err
		}
		client, err := s3store.NewClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", location, err)
		}
		s := s3store.New(client, bucket, prefix)
		if err := s.Check(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("%s: %w", location, err)
		}
		return s, nil
	case strings.Contains(location, "://"):
		return nil, fmt.Errorf("%q: unknown scheme; want a directory or s3://bucket/prefix", location)
	}
	return &promote.FS{Dir: location, ReadGroup: o.ReadGroup}, nil
}

// DefaultDir is the worker's default -store: /var/lib/airlock/store as
// root; else $XDG_DATA_HOME/airlock/store, or ~/.local/share/airlock/store
// when $XDG_DATA_HOME is unset or relative. An absolute path, so that
// whoever reads a publication back (enqueue -result, the HTTP API, MCP)
// finds it from any directory. "" when neither $XDG_DATA_HOME nor the home
// directory is known.
func DefaultDir() string { return defaultDirFor(os.Geteuid()) }

// defaultDirFor is DefaultDir for the effective uid euid.
func defaultDirFor(euid int) string {
	if euid == 0 {
		return "/var/lib/airlock/store"
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "airlock", "store")
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "share", "airlock", "store")
	}
	return ""
}

// Where is where the store at location publishes the output of a run's
// task (approve.Sink's Where), without opening the store: for a reader
// told where the store is (enqueue -store) rather than where the record
// says.
//
// runID and taskID come from a record in Redis: each must name one
// directory (no "/", no leading ".", as the stores' Publish refuses), so
// that a forged record cannot lead the reader out of the store.
func Where(location, runID, taskID string) (string, error) {
	if err := checkIDs(runID, taskID); err != nil {
		return "", err
	}
	switch {
	case location == "":
		return "", errors.New("empty: want a directory or s3://bucket/prefix")
	case IsS3(location):
		bucket, prefix, err := s3store.ParseURL(location)
		if err != nil {
			return "", err
		}
		return s3store.New(nil, bucket, prefix).Where(runID, taskID), nil
	case strings.Contains(location, "://"):
		return "", fmt.Errorf("%q: unknown scheme; want a directory or s3://bucket/prefix", location)
	}
	return (&promote.FS{Dir: location}).Where(runID, taskID), nil
}

// Reader reads publications back, from where the store of each said it
// put them: a directory of a filesystem store, which this process must be
// able to read, or s3://bucket/prefix/run_id/task_id/, through an S3
// client configured from the environment, created on first use. It
// implements promote.Reader; its zero value is ready to use.
type Reader struct {
	mu sync.Mutex
	s3 *s3store.Reader
}

var _ promote.Reader = (*Reader)(nil)

// ReadFile reads the file name of the publication at where, at most max
// bytes: a larger file is an error, and a missing one an error matching
// fs.ErrNotExist.
func (r *Reader) ReadFile(ctx context.Context, where, name string, max int64) ([]byte, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("storage: %q is not a file name of a publication", name)
	}
	if IsS3(where) {
		s3r, err := r.s3Reader(ctx)
		if err != nil {
			return nil, err
		}
		return s3r.ReadFile(ctx, where, name, max)
	}
	return readFile(where, name, max)
}

// Close releases the idle connections of the S3 client, if any.
func (r *Reader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s3 != nil {
		r.s3.Close()
	}
}

// s3Reader creates the S3 reader on first use; a failure is not kept,
// the next call tries again.
func (r *Reader) s3Reader(ctx context.Context) (*s3store.Reader, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s3 == nil {
		client, err := s3store.NewClient(ctx)
		if err != nil {
			return nil, err
		}
		r.s3 = s3store.NewReader(client)
	}
	return r.s3, nil
}

// readFile reads at most max bytes of the regular file name beneath the
// directory dir. Stores write regular files with one link, never a link:
// what is anything else was planted, and is refused before a byte is read.
// A symbolic link as the file's own name is refused (followed, it could
// lead anywhere beneath dir, and dir may be a place others write to); so
// is a file with several hard links, a FIFO (which would block the
// reader: dir is opened as a directory and the file non-blocking), or a
// device.
func readFile(dir, name string, max int64) ([]byte, error) {
	// The trailing separator makes a FIFO or a file at dir fail at once
	// (not a directory), where opening it would wait for a writer.
	root, err := os.OpenRoot(dir + string(filepath.Separator))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	name = filepath.FromSlash(name)
	path := filepath.Join(dir, name)
	li, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if li.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s: a symbolic link, which no store writes", path)
	}
	f, err := root.OpenFile(name, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case !os.SameFile(li, fi):
		return nil, fmt.Errorf("%s: replaced while being opened", path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	case links(fi) > 1:
		return nil, fmt.Errorf("%s: %d hard links, where a store writes one", path, links(fi))
	case fi.Size() > max:
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, max)
	}
	return b, nil
}

// checkIDs checks that a record's run and task ids each name one
// directory of a store (promote.CheckName).
func checkIDs(runID, taskID string) error {
	if err := promote.CheckName("run_id", runID); err != nil {
		return err
	}
	return promote.CheckName("task_id", taskID)
}

// CheckWhere checks that where, a publication's location as a record
// gives it (its published_to), has the shape a store gives the
// publication of task taskID of run runID: a clean absolute directory
// ending in runID/taskID, or s3://bucket/prefix/runID/taskID/. A reader
// that has no store of its own to look in reads only such a location;
// what it reads there is confined beneath it (ReadFile).
func CheckWhere(where, runID, taskID string) error {
	if err := checkIDs(runID, taskID); err != nil {
		return err
	}
	tail := runID + "/" + taskID
	if IsS3(where) {
		rest, ok := strings.CutSuffix(where, "/"+tail+"/")
		if !ok {
			return fmt.Errorf("published_to %q does not end with /%s/, as an S3 store names the publication", where, tail)
		}
		if _, _, err := s3store.ParseURL(rest); err != nil {
			return fmt.Errorf("published_to %q: %w", where, err)
		}
		return nil
	}
	if !filepath.IsAbs(where) || filepath.Clean(where) != where {
		return fmt.Errorf("published_to %q is not a clean absolute path", where)
	}
	if !strings.HasSuffix(filepath.ToSlash(where), "/"+tail) || len(where) == len(tail)+1 {
		return fmt.Errorf("published_to %q does not end with /%s, as a store names the publication", where, tail)
	}
	return nil
}

// shared is the Reader of ReadFile.
var shared Reader

// ReadFile reads a file of a publication with a Reader shared by the
// process (and its S3 client).
func ReadFile(ctx context.Context, where, name string, max int64) ([]byte, error) {
	return shared.ReadFile(ctx, where, name, max)
}
