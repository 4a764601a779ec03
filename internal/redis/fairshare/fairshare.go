// Package fairshare is how one queue is shared between its principals: the
// admission of a run against its principal's quota (the risk policy's
// quotas: section, which workers publish per queue), and the fair share of
// the queue's workers between principals.
//
// Every run enters its queue held, in its principal's group (an asynq
// group no aggregator serves: asynq keeps it, in order, until released),
// and Admit releases it into the queue's pending list (asynq's) only while
// its principal has fewer than Window runs waiting there: a principal
// that queued 10,000 runs has two in the queue at any time, the others
// held in its own line, so that a run of another principal waits behind
// at most Window runs of each principal with a backlog, never behind the
// whole backlog. Each time one of a principal's runs starts (Started) or,
// under max_active, ends (Ended), the worker releases its next; a sweep
// (Sweep) catches what a crash left.
//
// Under max_active, a principal's runs are released only while those it
// has waiting or running are fewer: the bound holds for every API server
// and worker together, since each release is one script in the queue's
// Redis Cluster slot. Admit refuses a run, and deletes it, past
// runs_per_minute, max_sessions or max_queued, in the same script.
package fairshare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/wake"
	"github.com/airlock-run/airlock/policy"
)

// Window is how many runs of one principal wait in a queue's pending list
// at most (released, not yet taken by a worker), unless the queue's
// workers published more (PublishQuotas: the slots of the last to start,
// so that one worker's slots all find work): a run of another principal
// waits behind at most that many of each.
const Window = 2

// windowField is the field of the quotas hash that holds the window.
const windowField = "#window"

// SweepEvery is how often a worker sweeps its queues (Sweep).
const SweepEvery = 10 * time.Second

// groupPrefix starts the asynq group of a principal's held runs.
const groupPrefix = "p:"

// Group is the asynq group (asynq.Group) a run of principal is enqueued
// in: "p:" and the principal ("p:" for a run that names none).
func Group(principal string) string { return groupPrefix + principal }

// ErrQuota is what a *QuotaError matches (errors.Is): a principal's quota
// refused the call.
var ErrQuota = errors.New("quota exceeded")

// QuotaError is a refusal of a principal's quota.
type QuotaError struct {
	Quota      string        // the quota's name, as policy's quotas: section spells it (max_queued...)
	Principal  string        // who was refused ("" for a run naming none)
	Queue      string        // the queue whose workers published the quota ("" for a per-server bound)
	Limit      int64         // the quota's value
	RetryAfter time.Duration // when trying again may succeed
}

func (e *QuotaError) Error() string {
	who := "principal " + strconv.Quote(e.Principal)
	if e.Principal == "" {
		who = "a run naming no principal"
	}
	where := ""
	if e.Queue != "" {
		where = fmt.Sprintf(" in queue %q", e.Queue)
	}
	return fmt.Sprintf("quota %s: %s holds its %d%s; try again in %s (the operator sets quotas in the worker's policy file, quotas: section)",
		e.Quota, who, e.Limit, where, e.RetryAfter)
}

// Is makes a *QuotaError match ErrQuota.
func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

// keys are the keys of a queue and principal the scripts use.
type keys struct {
	group, groups, pending, claim, sessions, quotas string
	rpm, taskPrefix, gname, wake                    string
}

func keysOf(prefix, queue, principal string) keys {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	g := Group(principal)
	ap := asynqkey.Prefix(queue)
	fair := prefix + "fair:{" + queue + "}:"
	return keys{
		group: ap + "g:" + g, groups: ap + "groups", pending: asynqkey.Pending(queue),
		claim: fair + "claim:" + principal, sessions: fair + "sessions:" + principal, rpm: fair + "rpm:" + principal + ":",
		quotas:     QuotasKey(prefix, queue),
		taskPrefix: ap + "t:", gname: g, wake: wake.Channel(prefix, queue),
	}
}

// QuotasKey is the hash that holds the quotas published for queue:
// <prefix>quotas:{<queue>}, in the queue's Redis Cluster slot.
func QuotasKey(prefix, queue string) string {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return prefix + "quotas:{" + queue + "}"
}

// boolArg is a script's flag argument.
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ErrExists is Enqueue's error when the task id is taken.
var ErrExists = errors.New("fairshare: the task id exists")

// Enqueue writes run taskID of principal into queue, its asynq message
// msg (internal/redis/asynqmsg, held in group Group(principal)), and
// admits it, in one script: straight to the queue when nothing of its
// principal's waits ahead of it and its share has room, else into its
// line, admitted, for release. A quota's refusal writes nothing and is a
// *QuotaError; a taken id is ErrExists. session: the run opens a session
// (max_sessions). The queue must be in asynq's set of queues
// (asynqkey.Queues): the caller adds it, once.
func Enqueue(ctx context.Context, rdb redis.Scripter, prefix, queue, principal, taskID string, msg []byte, session bool) error {
	k := keysOf(prefix, queue, principal)
	now := time.Now()
	minute := now.Unix() / 60
	res, err := enqueueScript.Run(ctx, rdb,
		[]string{k.taskPrefix + taskID, k.group, k.groups, k.pending, k.claim, k.sessions, k.quotas,
			k.rpm + strconv.FormatInt(minute, 10), k.rpm + strconv.FormatInt(minute-1, 10)},
		k.taskPrefix, k.gname, principal, taskID, now.UnixMilli(), now.UnixNano(), Window, boolArg(session), k.wake,
		now.UnixMilli()%60000, now.UnixMicro(), msg).Slice()
	if err != nil {
		return fmt.Errorf("fairshare: enqueueing run %s in queue %q: %w", taskID, queue, err)
	}
	return admitReply(res, principal, queue)
}

// admitReply reads the reply of admitScript or enqueueScript: {1, ...}
// admitted, {-1} the id is taken, {0, quota, limit, retry after (s)}
// refused.
func admitReply(res []any, principal, queue string) error {
	switch {
	case len(res) == 1:
		return ErrExists
	case len(res) == 4:
		name, _ := res[1].(string)
		limit, _ := res[2].(int64)
		after, _ := res[3].(int64)
		return &QuotaError{Quota: name, Principal: principal, Queue: queue, Limit: limit, RetryAfter: time.Duration(after) * time.Second}
	}
	return nil
}

// Admit admits run taskID of principal, just enqueued held in queue
// (asynq.Group(Group(principal))), and releases what its share allows; or
// refuses it past its quota, deleting the task: the error is then a
// *QuotaError. session: the run opens a session (max_sessions). Only an
// admitted run is ever released; one never admitted is withdrawn by the
// sweep (Withdrawn). Admitting a run again (admitted, or released
// already) checks nothing more.
func Admit(ctx context.Context, rdb redis.Scripter, prefix, queue, principal, taskID string, session bool) error {
	k := keysOf(prefix, queue, principal)
	now := time.Now()
	minute := now.Unix() / 60
	res, err := admitScript.Run(ctx, rdb,
		[]string{k.group, k.groups, k.pending, k.claim, k.sessions, k.quotas, k.rpm + strconv.FormatInt(minute, 10), k.rpm + strconv.FormatInt(minute-1, 10)},
		k.taskPrefix, k.gname, principal, taskID, now.UnixMilli(), now.UnixNano(), Window, boolArg(session), k.wake, now.UnixMilli()%60000, now.UnixMicro()).Slice()
	if err != nil {
		return fmt.Errorf("fairshare: admitting run %s of queue %q: %w", taskID, queue, err)
	}
	return admitReply(res, principal, queue)
}

// Release releases what principal's share of queue allows now (the
// sweep's, and a caller's that knows nothing more); it returns how many
// runs it released.
func Release(ctx context.Context, rdb redis.Scripter, prefix, queue, principal string) (int, error) {
	return release(ctx, rdb, prefix, queue, principal, "", "")
}

// Started releases what principal's share of queue allows once its run
// taskID started: its place among the runs waiting in the queue is free.
// A principal without max_active (as published) and nothing held costs
// Redis three commands.
func Started(ctx context.Context, rdb redis.Scripter, prefix, queue, principal, taskID string) (int, error) {
	return release(ctx, rdb, prefix, queue, principal, "", taskID)
}

// Ended releases what principal's share of queue allows once its run
// taskID ended for good (asynq will not run it again): it no longer counts
// against max_active.
func Ended(ctx context.Context, rdb redis.Scripter, prefix, queue, principal, taskID string) (int, error) {
	return release(ctx, rdb, prefix, queue, principal, taskID, "")
}

func release(ctx context.Context, rdb redis.Scripter, prefix, queue, principal, done, started string) (int, error) {
	k := keysOf(prefix, queue, principal)
	now := time.Now()
	n, err := releaseScript.Run(ctx, rdb, []string{k.group, k.groups, k.pending, k.claim, k.quotas},
		k.taskPrefix, k.gname, principal, done, now.UnixMilli(), now.UnixNano(), Window, k.wake, started).Int()
	if err != nil {
		return 0, fmt.Errorf("fairshare: releasing runs of principal %q in queue %q: %w", principal, queue, err)
	}
	return n, nil
}

// Withdrawn is how long after its enqueue a run whose admission never
// came is deleted by the sweep (Sweep): its enqueuer was told the run was
// not admitted (or is gone), and nothing of it runs.
const Withdrawn = 30 * time.Second

// Sweep releases what each principal holding runs in queue may have
// waiting: after a crash, a canceled run or a task deleted by hand, no
// start or end of the principal's runs may come to release them; and
// withdraws the runs whose admission never came (Withdrawn). One
// SMEMBERS, and two scripts per principal that holds runs.
func Sweep(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) error {
	groups, err := rdb.SMembers(ctx, asynqkey.Prefix(queue)+"groups").Result()
	if err != nil {
		return fmt.Errorf("fairshare: listing the principals holding runs in queue %q: %w", queue, err)
	}
	cutoff := time.Now().Add(-Withdrawn).Unix()
	var errs []error // one principal's failure (its quota unreadable) stops no other's sweep
	for _, g := range groups {
		p, ok := strings.CutPrefix(g, groupPrefix)
		if !ok {
			continue
		}
		k := keysOf(prefix, queue, p)
		if err := withdrawScript.Run(ctx, rdb, []string{k.group, k.groups}, k.taskPrefix, k.gname, cutoff).Err(); err != nil {
			errs = append(errs, fmt.Errorf("fairshare: withdrawing the runs of principal %q never admitted in queue %q: %w", p, queue, err))
		}
		if _, err := Release(ctx, rdb, prefix, queue, p); err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// maxQuotaBytes bounds one principal's published quota as it is read.
const maxQuotaBytes = 4 << 10

// PublishQuotas stores quotas (policy.Policy.Quotas) as the quotas of each
// queue, and window (the worker's slots; below Window: Window) as its
// window, replacing what an earlier worker published (the last worker to
// start wins, as for grants); no quotas: no quota.
func PublishQuotas(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, quotas map[string]policy.Quota, window int) error {
	vals := make([]any, 0, 2*len(quotas)+2)
	vals = append(vals, windowField, max(window, Window))
	for p, q := range quotas {
		b, err := json.Marshal(q)
		if err != nil {
			return fmt.Errorf("fairshare: encoding the quota of %q: %w", p, err)
		}
		vals = append(vals, p, b)
	}
	for _, queue := range queues {
		// One script, not MULTI (which the documented ACL leaves out): a
		// reader never sees the quotas half replaced.
		err := replaceScript.Run(ctx, rdb, []string{QuotasKey(prefix, queue)}, vals...).Err()
		if err != nil {
			return fmt.Errorf("fairshare: publishing the quotas of queue %q: %w", queue, err)
		}
	}
	return nil
}

// replaceScript replaces a hash with the field, value pairs of ARGV.
var replaceScript = redis.NewScript(`
redis.call("DEL", KEYS[1])
if #ARGV > 0 then redis.call("HSET", KEYS[1], unpack(ARGV)) end
return 1
`)

// LoadQuota returns the quota published for principal in queue: its own,
// else "*"'s, else none (a zero Quota).
func LoadQuota(ctx context.Context, rdb redis.UniversalClient, prefix, queue, principal string) (policy.Quota, error) {
	key := QuotasKey(prefix, queue)
	fields := []string{policy.AnyPrincipal}
	if principal != "" {
		fields = []string{principal, policy.AnyPrincipal}
	}
	vals, err := rdb.HMGet(ctx, key, fields...).Result()
	if err != nil {
		return policy.Quota{}, fmt.Errorf("fairshare: loading the quota of %q in queue %q: %w", principal, queue, err)
	}
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if len(s) > maxQuotaBytes {
			return policy.Quota{}, fmt.Errorf("fairshare: %s holds a quota of %d bytes, more than a worker publishes (delete it, then restart the queue's workers)", key, len(s))
		}
		q, err := decodeQuota([]byte(s))
		if err != nil {
			return policy.Quota{}, fmt.Errorf("fairshare: %s does not hold quotas: %w (delete it, then restart the queue's workers)", key, err)
		}
		return q, nil
	}
	return policy.Quota{}, nil
}

// decodeQuota reads a published quota strictly, as the scripts do: an
// object of known fields, each a whole number of at least 0 (a size may
// be written with its unit), never null: a quota that cannot be read
// bounds nothing it should, so it is an error (closed).
func decodeQuota(b []byte) (policy.Quota, error) {
	var q policy.Quota
	var fields map[string]json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) || json.Unmarshal(b, &fields) != nil {
		return q, errors.New("not a JSON object")
	}
	for k, v := range fields {
		if string(bytes.TrimSpace(v)) == "null" {
			return q, fmt.Errorf("%s is null", k)
		}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&q); err != nil {
		return q, err
	}
	if q.MaxQueued < 0 || q.MaxActive < 0 || q.MaxSessions < 0 || q.MaxPendingBytes < 0 || q.MaxWaiters < 0 || q.RunsPerMinute < 0 {
		return q, fmt.Errorf("a negative bound in %+v", q)
	}
	return q, nil
}
