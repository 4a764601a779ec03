package promote

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/record"
)

// BenchmarkFSPublish publishes a 1 KiB result with its manifest, from two
// goroutines (the worker's default concurrency), each run in a new run
// directory: the auto-promoted path of cmd/bench's script workload.
func BenchmarkFSPublish(b *testing.B) {
	s := &FS{Dir: b.TempDir()}
	result := []byte(strings.Repeat("x", 1000))
	var n atomic.Int64
	b.SetParallelism(1)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			m := &approve.Manifest{RunID: fmt.Sprintf("run-%d", i), TaskID: fmt.Sprintf("task-%d", i), ApprovalID: fmt.Sprintf("ap-%d", i),
				AcceptedBy: "policy:default", AcceptedAt: time.Now(), PromotedAt: time.Now(),
				Result: &record.Artifact{Name: approve.ResultName, Bytes: int64(len(result))}, Artifacts: []record.Artifact{}}
			if _, err := s.Publish(context.Background(), m, map[string][]byte{approve.ResultName: result}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDurableFile is what cmd/bench's durable baseline does with a
// result, beside BenchmarkFSPublish: a temp file written, fsynced, renamed
// into a directory, and the directory fsynced.
func BenchmarkDurableFile(b *testing.B) {
	dir := b.TempDir()
	result := []byte(strings.Repeat("x", 1000))
	var n atomic.Int64
	b.SetParallelism(1)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if err := durableFile(dir, i, result); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// durableFile writes data to dir/<i>.json through a temp file, fsynced,
// renamed, and the directory fsynced.
func durableFile(dir string, i int64, data []byte) error {
	tmp := fmt.Sprintf("%s/.tmp-%d", dir, i)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, fmt.Sprintf("%s/%d.json", dir, i))
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}
