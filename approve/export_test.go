package approve

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ParkMany parks new approvals (without data) in two round trips: a
// pipeline of Park's script, then one of its index updates. For benchmarks'
// setup.
func (s *Store) ParkMany(ctx context.Context, as []*Approval) error {
	ps := make([]*parking, len(as))
	for i, a := range as {
		p, err := s.prepare(a, nil)
		if err != nil {
			return err
		}
		ps[i] = p
	}
	cmds := make([]*redis.Cmd, len(ps))
	if _, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range ps {
			cmds[i] = parkScript.Eval(ctx, pipe, s.Keys(p.a.ID), p.args...)
			if p.a.StagedBytes > 0 {
				reserveScript.Eval(ctx, pipe, []string{s.stagedKey()}, p.a.ID, p.a.StagedBytes, 0, p.a.Run.Principal, 0)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range ps {
			if n, _ := cmds[i].Int(); n != 1 {
				return fmt.Errorf("%s exists", p.a.ID)
			}
			s.indexOps(ctx, pipe, p.a)
			s.auditOp(ctx, pipe, p.a.ID, p.event)
		}
		return nil
	})
	return err
}

var PlainStrings = plainStrings
