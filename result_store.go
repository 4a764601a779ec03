package airlock

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/promote/storage"
	"github.com/airlock-run/airlock/record"
)

// readFrom is where Result reads the publication of task taskID of queue,
// which its store said is at where (the record's published_to):
//
//   - in ClientOptions.Store when set: the reader's own view of the store;
//   - at where when it is absolute or an s3:// URL, as workers write it,
//     and has the shape of the publication of this run's task
//     (storage.CheckWhere: a forged record cannot send the reader
//     elsewhere, and what it reads stays beneath where);
//   - else (a worker whose -store was relative, before workers made it
//     absolute) in the store the queue's workers announce, when they
//     announce one; several are an error naming them, never a guess; none
//     is an error asking for the store: a relative path is never read
//     relative to this process's directory (a forged one could lead
//     anywhere from there).
func (c *Client) readFrom(ctx context.Context, queue, taskID string, rec *record.Run, where string) (string, error) {
	if c.opts.Store != "" {
		w, err := storage.Where(c.opts.Store, rec.RunID, taskID)
		if err != nil {
			return "", storeError{fmt.Errorf("airlock: store %w (-store of enqueue, api or mcp; ClientOptions.Store)", err)}
		}
		return w, nil
	}
	if storage.IsS3(where) || filepath.IsAbs(where) {
		if err := storage.CheckWhere(where, rec.RunID, taskID); err != nil {
			return "", storeError{fmt.Errorf("airlock: task %s: %w: not read (give the workers' store: -store of enqueue, api or mcp; ClientOptions.Store)", taskID, err)}
		}
		return where, nil
	}
	workers, err := queuepolicy.LoadWorkers(ctx, c.rdb, c.opts.Prefix, queue, time.Now())
	if err != nil {
		return "", fmt.Errorf("airlock: task %s was published to %s, relative to its worker's directory: %w", taskID, where, err)
	}
	switch stores := queuepolicy.Stores(workers); len(stores) {
	case 0:
		return "", storeError{fmt.Errorf("airlock: task %s was published to %s, relative to its worker's directory, and no worker of queue %q announces its store: give the workers' store (-store of enqueue, api or mcp; ClientOptions.Store)", taskID, where, queue)}
	case 1:
		w, err := storage.Where(stores[0], rec.RunID, taskID)
		if err != nil {
			return "", storeError{err}
		}
		return w, nil
	default:
		return "", storeError{fmt.Errorf("airlock: task %s was published to %s, relative to its worker's directory, and the workers of queue %q announce %d stores (%s): say which holds it (-store of enqueue, api or mcp; ClientOptions.Store)",
			taskID, where, queue, len(stores), strings.Join(stores, ", "))}
	}
}

// noManifest is the error of Result when where holds no manifest: it
// matches ErrNotPromoted, and says where the reader looked and how to
// point it elsewhere.
func (c *Client) noManifest(taskID, where string, err error) error {
	hint := "if this process sees the workers' store elsewhere, say where (-store of enqueue, api or mcp; ClientOptions.Store)"
	if c.opts.Store != "" {
		hint = "read in the store " + c.opts.Store + " (-store): check that it is the workers' store"
	}
	return fmt.Errorf("airlock: task %s: %s holds no manifest: %w (%w); %s", taskID, where, ErrNotPromoted, err, hint)
}
