package approve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Purge deletes every trace of the approvals of runs whose run_id starts
// with runPrefix and a dash, created since since (or in the minute before
// it): their keys, their index entries, the count of their staged bytes,
// and their entries in the audit stream. It returns how many approvals it
// deleted. It is for a benchmark cleaning up after itself (cmd/bench):
// an approval is otherwise never deleted before its retention ends, and
// no other package deletes or rewrites an approval's keys.
func (s *Store) Purge(ctx context.Context, runPrefix string, since time.Time) (int, error) {
	if runPrefix == "" {
		return 0, errors.New("approve: purge: runPrefix is empty (it would name every run whose id starts with a dash)")
	}
	from := since.Add(-time.Minute)
	ids, err := s.rdb.ZRangeByScore(ctx, s.index(idxAll), &redis.ZRangeBy{
		Min: strconv.FormatInt(from.UnixMicro(), 10), Max: "+inf"}).Result()
	if err != nil {
		return 0, fmt.Errorf("approve: purge: %w", err)
	}
	ours := map[string]bool{}
	for i := 0; i < len(ids); i += 1000 {
		batch := ids[i:min(i+1000, len(ids))]
		cmds := make([]*redis.StringCmd, len(batch))
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, id := range batch {
				cmds[j] = p.HGet(ctx, s.hashKey(id), fRunID)
			}
			return nil
		})
		for j, c := range cmds {
			if strings.HasPrefix(c.Val(), runPrefix+"-") {
				ours[batch[j]] = true
			}
		}
	}
	if len(ours) == 0 {
		return 0, nil
	}
	var errs []error
	members := make([]any, 0, len(ours))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id := range ours {
			p.Unlink(ctx, s.Keys(id)...)
			releaseScript.Eval(ctx, p, []string{s.stagedKey()}, id)
			members = append(members, id)
		}
		for _, idx := range []string{idxPending, idxExpiry, idxAccepted, idxUnpromoted, idxRejected, idxExpired, idxAll} {
			p.ZRem(ctx, s.index(idx), members...)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("approve: purge: %w", err))
	}
	if err := s.purgeAudit(ctx, strconv.FormatInt(from.UnixMilli(), 10), ours); err != nil {
		errs = append(errs, fmt.Errorf("approve: purge the audit stream: %w", err))
	}
	return len(ours), errors.Join(errs...)
}

// purgeAudit deletes the audit entries from stream id start on whose
// approval is in ids.
func (s *Store) purgeAudit(ctx context.Context, start string, ids map[string]bool) error {
	for {
		msgs, err := s.rdb.XRangeN(ctx, s.auditKey(), start, "+", 1000).Result()
		if err != nil {
			return err
		}
		var del []string
		for _, m := range msgs {
			if id, _ := m.Values["id"].(string); ids[id] {
				del = append(del, m.ID)
			}
		}
		if len(del) > 0 {
			if err := s.rdb.XDel(ctx, s.auditKey(), del...).Err(); err != nil {
				return err
			}
		}
		if len(msgs) < 1000 {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}
