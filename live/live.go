// Package live carries a step's output to whoever listens while the step
// runs: the worker appends what the run's record will keep of its stdout
// and stderr, secrets redacted, to the run's output stream in Redis (a
// stream capped at MaxEntries, kept TTL), and a listener (the HTTP API's
// SSE route, the Go client's OnOutput, the MCP server's progress
// notifications) reads it from a position, each piece with its stream
// entry id as its sequence number: a listener that comes back with the
// last id it saw misses nothing and sees nothing twice. A listener says it
// listens (Listen, a key that expires): a worker sends nothing for a run
// nobody listens to.
package live

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
)

// Output is one piece of a step's output.
type Output struct {
	// Seq is its position in the run's output stream (the stream entry
	// id): a reader resumes after it.
	Seq    string `json:"seq"`
	Step   string `json:"step"`
	Stream string `json:"stream"` // stdout or stderr
	Data   string `json:"data"`
	// Encoding is "base64" when Data is not text (as the record's steps).
	Encoding string `json:"encoding,omitempty"`
}

// Bounds of a run's output stream.
const (
	// MaxEntries caps the entries a run's stream keeps (the oldest go).
	MaxEntries = 4096
	// TTL is how long a run's stream stays after its last piece.
	TTL = time.Hour
	// ListenTTL is how long a Listen lasts; a listener renews it.
	ListenTTL = 30 * time.Second
)

// Conn reads and writes runs' output streams under a key prefix
// ("airlock:" when "").
type Conn struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewConn returns the output streams of rdb under prefix.
func NewConn(rdb redis.UniversalClient, prefix string) *Conn {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return &Conn{rdb: rdb, prefix: prefix}
}

func (c *Conn) key(id string) string       { return c.prefix + "output:{" + id + "}" }
func (c *Conn) listenKey(id string) string { return c.prefix + "output:{" + id + "}:listen" }

// Listen says someone listens to run id's output, for ListenTTL.
func (c *Conn) Listen(ctx context.Context, id string) error {
	return c.rdb.Set(ctx, c.listenKey(id), "1", ListenTTL).Err()
}

// Listened reports whether someone listens to run id's output (false when
// Redis does not say: nothing is sent).
func (c *Conn) Listened(ctx context.Context, id string) bool {
	n, err := c.rdb.Exists(ctx, c.listenKey(id)).Result()
	return err == nil && n > 0
}

// Append appends pieces of run id's output, in one round trip.
func (c *Conn) Append(ctx context.Context, id string, outs []Output) error {
	p := c.rdb.Pipeline()
	for _, o := range outs {
		vals := []any{"step", o.Step, "stream", o.Stream, "data", o.Data}
		if o.Encoding != "" {
			vals = append(vals, "encoding", o.Encoding)
		}
		p.XAdd(ctx, &redis.XAddArgs{Stream: c.key(id), MaxLen: MaxEntries, Approx: true, Values: vals})
	}
	p.Expire(ctx, c.key(id), TTL)
	_, err := p.Exec(ctx)
	return err
}

// Last is the position of run id's last piece of output ("0-0" when none):
// a reader from there sees what comes next.
func (c *Conn) Last(ctx context.Context, id string) (string, error) {
	xs, err := c.rdb.XRevRangeN(ctx, c.key(id), "+", "-", 1).Result()
	if err != nil || len(xs) == 0 {
		return "0-0", err
	}
	return xs[0].ID, nil
}

// Read returns up to count pieces of run id's output after position
// after, waiting up to block for one (0: no wait).
func (c *Conn) Read(ctx context.Context, id, after string, block time.Duration, count int64) ([]Output, error) {
	if block <= 0 {
		xs, err := c.rdb.XRangeN(ctx, c.key(id), "("+after, "+", count).Result()
		if err != nil {
			return nil, err
		}
		return decode(xs), nil
	}
	res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{c.key(id), after}, Count: count, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil || len(res) == 0 {
		return nil, err
	}
	return decode(res[0].Messages), nil
}

// ValidSeq reports whether s is a stream position a reader may resume
// after (what Seq holds).
func ValidSeq(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	return ok && ms != "" && seq != "" && strings.Trim(ms, "0123456789") == "" && strings.Trim(seq, "0123456789") == "" && len(s) <= 41
}

func decode(xs []redis.XMessage) []Output {
	out := make([]Output, 0, len(xs))
	for _, x := range xs {
		o := Output{Seq: x.ID}
		o.Step, _ = x.Values["step"].(string)
		o.Stream, _ = x.Values["stream"].(string)
		o.Data, _ = x.Values["data"].(string)
		o.Encoding, _ = x.Values["encoding"].(string)
		out = append(out, o)
	}
	return out
}

// followBlock is how long one read of a followed stream blocks: the most
// a follow's stop waits for it.
const followBlock = 200 * time.Millisecond

// Follow calls f with run id's output after position from ("" or an
// invalid one: from now on), in order, from one goroutine, until the
// returned stop, which returns once f has had everything sent before it
// (and may be called more than once). It says it listens (Listen) and
// renews it, so that workers send the output.
func (c *Conn) Follow(ctx context.Context, id, from string, f func(Output)) (stop func()) {
	if !ValidSeq(from) {
		var err error
		if from, err = c.Last(ctx, id); err != nil {
			from = "0-0"
		}
	}
	_ = c.Listen(ctx, id)
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	deliver := func(outs []Output) {
		for _, o := range outs {
			f(o)
			from = o.Seq
		}
	}
	go func() {
		defer close(done)
		renew := time.Now().Add(ListenTTL / 3)
		for fctx.Err() == nil {
			outs, err := c.Read(fctx, id, from, followBlock, 256)
			if err != nil && fctx.Err() == nil {
				time.Sleep(followBlock)
			}
			deliver(outs)
			if time.Now().After(renew) {
				_ = c.Listen(fctx, id)
				renew = time.Now().Add(ListenTTL / 3)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			// What the worker sent before it answered: the rest of it.
			for range 64 {
				outs, err := c.Read(context.WithoutCancel(ctx), id, from, 0, 1024)
				if err != nil || len(outs) == 0 {
					return
				}
				deliver(outs)
			}
		})
	}
}
