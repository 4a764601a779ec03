//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/testkit/s3test"
	"github.com/airlock-run/airlock/record"
)

// TestS3StoreResult: the worker publishes to an S3 store (moto, a real
// server process) an output its policy promotes; Client.Result reads it
// from there; a promotion delivered again after a crash between the
// publication and its record publishes nothing twice.
//
// Not parallel: the AWS environment (t.Setenv) points both the worker and
// this process's reader at the server.
func TestS3StoreResult(t *testing.T) {
	needRoot(t)
	srv := s3test.Start(t)
	srv.Bucket(t, "airlock-e2e")
	srv.Setenv(t)
	pol := writePolicy(t, `{"default": "promote"}`)
	b := setup(t, "-store", "s3://airlock-e2e/outputs", "-policy", pol)
	ctx := context.Background()

	rec := b.run(reportSpec(`{"total": 42}`, `"run_id": "s3-run-1",`))
	if rec.State != record.StatePromoted {
		t.Fatalf("want promoted:\n%s", mustJSON(t, rec))
	}
	where := "s3://airlock-e2e/outputs/s3-run-1/" + rec.TaskID + "/"
	if rec.PublishedTo != where {
		t.Errorf("published_to %q, want %q", rec.PublishedTo, where)
	}
	p, err := b.client.Result(ctx, rec.TaskID)
	if err != nil {
		t.Fatalf("Result: %v\nworker logs:\n%s", err, b.worker.logs.String())
	}
	if string(p.Result) != `{"total": 42}` || p.Where != where || p.Manifest.ApprovalID != rec.ApprovalID ||
		p.Manifest.AcceptedBy != "policy:default" || len(p.Manifest.Artifacts) != 1 || p.Manifest.Artifacts[0].Name != "out/report.csv" {
		t.Errorf("published: %s", mustJSON(t, p))
	}
	c := srv.Client(t)
	dir := "outputs/s3-run-1/" + rec.TaskID + "/"
	before := s3Objects(t, c, dir)
	if got := strings.Join(s3Keys(before), " "); got != "manifest.json out/report.csv result.json" {
		t.Errorf("objects under %s: %s", dir, got)
	}
	if string(before["out/report.csv"]) != "a,b\n1,2\n" {
		t.Errorf("report.csv: %q", before["out/report.csv"])
	}

	// A crash after the publication, before the approval was marked
	// promoted (its staged data still there): the promotion is delivered
	// again, and the store keeps the first publication.
	rdb := redistest.Client(t)
	keys := approve.NewStore(rdb, approve.Options{}).Keys(rec.ApprovalID)
	if err := rdb.HDel(ctx, keys[0], "promoted_at").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys[1], "out/report.csv", "a,b\n1,2\n").Err(); err != nil {
		t.Fatal(err)
	}
	if err := approve.Enqueue(ctx, asynq.NewClientFromRedisClient(rdb), b.queue, rec.ApprovalID); err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	ok := eventually(time.Minute, func() bool {
		info, err := insp.GetTaskInfo(b.queue, approve.TaskID(rec.ApprovalID))
		return err == nil && info.State == asynq.TaskStateCompleted
	})
	if !ok {
		t.Fatalf("the promotion delivered again did not complete\nworker logs:\n%s", b.worker.logs.String())
	}
	logs := b.worker.logs.String()
	if !strings.Contains(logs, `"published":false`) || strings.Contains(logs, "promotion refused") {
		t.Errorf("the worker did not report the promotion as already published:\n%s", logs)
	}
	// Marked promoted again: the promotion went through the store's
	// Publish (which found its own manifest), not around it.
	if a, err := approve.NewStore(rdb, approve.Options{}).Get(ctx, rec.ApprovalID); err != nil || a.PromotedAt.IsZero() || !a.PromotedAt.After(p.Manifest.PromotedAt) {
		t.Errorf("approval after the second delivery: %+v %v", a, err)
	}
	after := s3Objects(t, c, dir)
	for k, v := range before {
		if !bytes.Equal(after[k], v) {
			t.Errorf("%s changed:\n%s\n->\n%s", k, v, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("objects: %v -> %v", s3Keys(before), s3Keys(after))
	}
	p2, err := b.client.Result(ctx, rec.TaskID)
	if err != nil || !p2.Manifest.PromotedAt.Equal(p.Manifest.PromotedAt) {
		t.Fatalf("Result after the second delivery: %v, %+v", err, p2)
	}

	// Without its manifest, a run is not published, whatever its files.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("airlock-e2e"), Key: aws.String(dir + "manifest.json")}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Result(ctx, rec.TaskID); !errors.Is(err, airlock.ErrNotPromoted) || !strings.Contains(err.Error(), "holds no manifest") {
		t.Errorf("Result without the manifest: %v", err)
	}
}

// TestS3StoreRefusedAtStart: a worker whose S3 store cannot be reached,
// or that is given -store-group with one, does not start, and says why.
func TestS3StoreRefusedAtStart(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	b := newBundle(t)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-store", "s3://no-such-bucket/x"}, "bucket no-such-bucket not reachable"},
		{[]string{"-store", "s3://Bad_Bucket/x"}, "-store:"},
		{[]string{"-store", "s3://airlock-e2e/x", "-store-group", "1234"}, "-store-group: only for a directory -store"},
	} {
		args := append([]string{"-redis", b.url, "-queues", b.queue, "-workspace-root", b.root}, tc.flags...)
		cmd := exec.Command(bin.worker, args...)
		cmd.Env = append(os.Environ(), srv.Env()...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := s3RunUntil(ctx, cmd)
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("worker %v: %v, stderr %q; want exit 1 saying %q", tc.flags, err, stderr.String(), tc.want)
		}
	}
}

// s3RunUntil runs cmd, killed when ctx ends.
func s3RunUntil(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

// s3Objects reads what the bucket airlock-e2e holds under prefix.
func s3Objects(t *testing.T, c *s3.Client, prefix string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("airlock-e2e"), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, o := range out.Contents {
		r, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("airlock-e2e"), Key: o.Key})
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(*o.Key, prefix)] = data
	}
	return got
}

func s3Keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
