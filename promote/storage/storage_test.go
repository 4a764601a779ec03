package storage_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/s3test"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/promote/s3store"
	"github.com/airlock-run/airlock/promote/storage"
)

func TestOpenDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	sink, err := storage.Open(context.Background(), dir, storage.Options{ReadGroup: 1234})
	if err != nil {
		t.Fatal(err)
	}
	fsSink, ok := sink.(*promote.FS)
	if !ok || fsSink.Dir != dir || fsSink.ReadGroup != 1234 {
		t.Fatalf("Open(%s) = %#v", dir, sink)
	}
}

func TestOpenRefusesBadLocations(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		loc  string
		o    storage.Options
		want string
	}{
		{"", storage.Options{}, "empty"},
		{"ftp://host/x", storage.Options{}, "unknown scheme"},
		{"s3://B/x", storage.Options{}, "bucket name"},
		{"s3://bkt:9000/x", storage.Options{}, "no user, port"},
		{"s3://bkt/x", storage.Options{ReadGroup: 1234}, "read group"},
	} {
		if _, err := storage.Open(ctx, tc.loc, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v; want an error saying %q", tc.loc, err, tc.want)
		}
	}
}

// TestS3 opens an S3 store from the environment, as the worker does, and
// reads a publication back, as a client does.
func TestS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "airlock-out")
	srv.Setenv(t)
	ctx := context.Background()

	_, err := storage.Open(ctx, "s3://no-such-bucket/x", storage.Options{})
	if err == nil || !strings.Contains(err.Error(), "not reachable") || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Errorf("Open of a missing bucket: %v", err)
	}
	sink, err := storage.Open(ctx, "s3://airlock-out/runs", storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := sink.(*s3store.Store)
	if !ok {
		t.Fatalf("Open = %T", sink)
	}
	defer st.Close()
	where := sink.Where("r1", "t1")
	if where != "s3://airlock-out/runs/r1/t1/" {
		t.Errorf("Where = %s", where)
	}

	r := &storage.Reader{}
	defer r.Close()
	if _, err := r.ReadFile(ctx, where, "manifest.json", 1<<20); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("manifest before publication: %v", err)
	}
	m := &approve.Manifest{RunID: "r1", TaskID: "t1", ApprovalID: "ap-1"}
	if pub, err := sink.Publish(ctx, m, map[string][]byte{approve.ResultName: []byte(`{"ok": true}`)}); err != nil || !pub {
		t.Fatalf("publish: %v %v", pub, err)
	}
	if b, err := r.ReadFile(ctx, where, "manifest.json", 1<<20); err != nil || !strings.Contains(string(b), `"ap-1"`) {
		t.Errorf("manifest: %s %v", b, err)
	}
	if b, err := r.ReadFile(ctx, where, approve.ResultName, 1<<20); err != nil || string(b) != `{"ok": true}` {
		t.Errorf("result: %s %v", b, err)
	}
	if b, err := storage.ReadFile(ctx, where, approve.ResultName, 4); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a read past its bound: %s %v", b, err)
	}
}

func TestReaderDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sink := &promote.FS{Dir: dir}
	m := &approve.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a"}
	if _, err := sink.Publish(ctx, m, map[string][]byte{approve.ResultName: []byte("42"), "out/x.csv": []byte("1,2\n")}); err != nil {
		t.Fatal(err)
	}
	where := sink.Where("r", "t")
	r := &storage.Reader{}
	if b, err := r.ReadFile(ctx, where, "out/x.csv", 100); err != nil || string(b) != "1,2\n" {
		t.Errorf("artifact: %q %v", b, err)
	}
	if _, err := r.ReadFile(ctx, where, approve.ResultName, 1); err == nil {
		t.Error("a read past its bound")
	}
	if _, err := r.ReadFile(ctx, sink.Where("r", "other"), "manifest.json", 100); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing manifest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../../secret", "/etc/passwd", ""} {
		if _, err := r.ReadFile(ctx, where, bad, 100); err == nil {
			t.Errorf("ReadFile %q: no error", bad)
		}
	}
}
