// Package s3store publishes promoted outputs to S3-compatible object
// storage (AWS S3, or a server such as MinIO, R2 or moto), exactly once,
// and reads them back.
//
// A store is s3://bucket/prefix. Each task of a run publishes under its
// own key prefix, as promote.FS does under its own directory:
//
//	s3://bucket/prefix/<run_id>/<task_id>/result.json
//	s3://bucket/prefix/<run_id>/<task_id>/<artifact>...
//	s3://bucket/prefix/<run_id>/<task_id>/manifest.json   (written last)
//
// S3 has no rename, so exactly once rests on conditional writes
// (If-None-Match: *, which the server must honour): every object is
// written only if absent, the files first, the manifest last. A run is
// published when, and only when, its manifest exists; a reader reads the
// manifest first and, missing, takes the run as unpublished.
package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/tasks"
)

// ManifestName is the object that makes a publication visible.
const ManifestName = "manifest.json"

// MaxManifest bounds the manifest a Store reads back.
const MaxManifest = 4 << 20

// Metadata keys (x-amz-meta-...) of every object a Store writes, for the
// operator who looks at an object: which approval wrote it, and its
// SHA-256.
const (
	MetaApproval = "airlock-approval-id"
	MetaSHA256   = "airlock-sha256"
)

// Store is an approve.Sink that publishes to s3://Bucket/Prefix.
//
// Publish writes each file of a run with If-None-Match: * (sorted by
// name), then the manifest with If-None-Match: *. A file that exists
// already is read back: holding the same bytes (an earlier, interrupted
// try of this publication, or a concurrent one), it is kept; holding
// others, the task belongs to another publication and Publish returns
// approve.ErrConflict, leaving what is there untouched. Of two
// publications of one task, the first to write a file they share (or the
// manifest) wins, and the other is refused; an interrupted one leaves
// objects but no manifest, which a retry of the same approval completes.
// A manifest that exists already is the publication: of the same
// approval, Publish reports published=false; of another, ErrConflict.
type Store struct {
	client         *s3.Client
	bucket, prefix string
	// RequestTimeout bounds each request, plus a second per MiB moved
	// (DefaultRequestTimeout when 0).
	RequestTimeout time.Duration
}

// New returns the store s3://bucket/prefix, reached through client (see
// NewClient). It makes no request: Check does.
func New(client *s3.Client, bucket, prefix string) *Store {
	return &Store{client: client, bucket: bucket, prefix: strings.Trim(prefix, "/")}
}

// Check asks whether the bucket exists and the credentials reach it
// (HeadBucket), and says what to check when not.
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, timeout(s.RequestTimeout, 0))
	defer cancel()
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err != nil {
		return fmt.Errorf("bucket %s not reachable at %s: %w (check that the bucket exists, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL for a server other than AWS, AWS_REGION, and the credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
			s.bucket, describe(s.client), err)
	}
	return nil
}

// Close releases the idle connections of the Store's client.
func (s *Store) Close() { closeIdle(s.client) }

// key is the object key of a run's task, or of one of its files.
func (s *Store) key(parts ...string) string {
	return path.Join(append([]string{s.prefix}, parts...)...)
}

// Where returns s3://bucket/prefix/<run_id>/<task_id>/.
func (s *Store) Where(runID, taskID string) string {
	return Scheme + s.bucket + "/" + s.key(runID, taskID) + "/"
}

// Publish implements approve.Sink.
func (s *Store) Publish(ctx context.Context, m *approve.Manifest, files map[string][]byte) (bool, error) {
	for _, id := range []struct{ field, v string }{{"run_id", m.RunID}, {"task_id", m.TaskID}, {"approval_id", m.ApprovalID}} {
		if err := promote.CheckName(id.field, id.v); err != nil {
			return false, err
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if name == ManifestName {
			return false, fmt.Errorf("promote: an artifact may not be named %s", ManifestName)
		}
		if err := tasks.CheckPath("artifact", name); err != nil {
			return false, err
		}
		names = append(names, name)
	}
	sort.Strings(names) // one order for all: the first shared file decides
	if done, err := s.already(ctx, m); done || err != nil {
		return false, err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		data := files[name]
		sum := sha256.Sum256(data)
		meta := metadata(m.ApprovalID)
		meta[MetaSHA256] = hex.EncodeToString(sum[:])
		key := s.key(m.RunID, m.TaskID, name)
		err := putIfAbsent(ctx, s.client, s.RequestTimeout, s.bucket, key, data, contentType(m, name), meta)
		if errors.Is(err, errExists) {
			err = s.same(ctx, m, key, data)
		}
		if errors.Is(err, errPublished) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return false, err
	}
	err = putIfAbsent(ctx, s.client, s.RequestTimeout, s.bucket, s.key(m.RunID, m.TaskID, ManifestName), append(mb, '\n'),
		"application/json", metadata(m.ApprovalID))
	if errors.Is(err, errExists) {
		// Published meanwhile: the manifest says by which approval.
		done, err := s.already(ctx, m)
		if err == nil && !done {
			err = fmt.Errorf("promote: %s%s vanished after a conditional write found it", s.Where(m.RunID, m.TaskID), ManifestName)
		}
		return false, err
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// already reports whether the task's manifest holds the publication of
// m's approval; a publication of another approval is approve.ErrConflict.
func (s *Store) already(ctx context.Context, m *approve.Manifest) (bool, error) {
	where := s.Where(m.RunID, m.TaskID)
	b, err := getBounded(ctx, s.client, s.RequestTimeout, s.bucket, s.key(m.RunID, m.TaskID, ManifestName), MaxManifest)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var old approve.Manifest
	if err := json.Unmarshal(b, &old); err != nil {
		return false, fmt.Errorf("promote: %s%s: %w", where, ManifestName, err)
	}
	if old.ApprovalID != m.ApprovalID {
		return false, fmt.Errorf("%w: %s holds approval %s", approve.ErrConflict, where, old.ApprovalID)
	}
	return true, nil
}

// errPublished ends a Publish that found its own publication complete.
var errPublished = errors.New("published")

// same checks that the object at key, which exists, holds data: written
// by an earlier try of this publication, or a concurrent one. Other bytes
// mean the task belongs to another publication: approve.ErrConflict.
func (s *Store) same(ctx context.Context, m *approve.Manifest, key string, data []byte) error {
	got, err := getBounded(ctx, s.client, s.RequestTimeout, s.bucket, key, int64(len(data)))
	switch {
	case err == nil && bytes.Equal(got, data):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("promote: s3://%s/%s vanished after a conditional write found it", s.bucket, key)
	case err != nil && !errors.Is(err, errTooLarge):
		return err
	}
	// Other bytes (or more of them): whose? A manifest of this approval
	// means it was published whole meanwhile.
	if done, err := s.already(ctx, m); err != nil || done {
		if done {
			return errPublished
		}
		return err
	}
	return fmt.Errorf("%w: s3://%s/%s holds other bytes, from another publication of the task that has no manifest yet (in progress, or interrupted: the retry of its approval completes it)",
		approve.ErrConflict, s.bucket, key)
}

// metadata is an object's metadata naming its approval, when the id is
// printable ASCII, as S3's headers must be (ids are "ap-" and hex).
func metadata(approvalID string) map[string]string {
	for _, r := range approvalID {
		if r < ' ' || r > '~' {
			return map[string]string{}
		}
	}
	return map[string]string{MetaApproval: approvalID}
}

// contentType is the Content-Type of a published file: the manifest's.
func contentType(m *approve.Manifest, name string) string {
	if m.Result != nil && name == approve.ResultName && m.Result.ContentType != "" {
		return m.Result.ContentType
	}
	for _, a := range m.Artifacts {
		if a.Name == name && a.ContentType != "" {
			return a.ContentType
		}
	}
	return "application/octet-stream"
}
