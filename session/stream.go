package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
)

// Files of any size a workspace holds move in and out of a session in
// chunks (OpUpload, OpDownload), through a Redis list of the call's own
// (Call.Xfer) that holds at most MaxChunksQueued of them at once: the
// sender waits while it is full, so that neither side, nor Redis, ever
// holds more than a few chunks of a file. Each chunk is a byte of kind
// (data, end, abort) and the data.

// Bounds of a transfer.
const (
	// ChunkBytes is the most one chunk holds.
	ChunkBytes = 1 << 20
	// MaxChunksQueued is the most chunks a transfer's list holds.
	MaxChunksQueued = 4
	// ChunkWait is the longest a side waits for the other's next chunk
	// (or for room): past it the transfer fails.
	ChunkWait = 30 * time.Second
)

const (
	chunkData  = 'd'
	chunkEnd   = 'e'
	chunkAbort = 'a'
)

func (c *Conn) xferKey(id, xfer string) string {
	return c.prefix + "session:{" + id + "}:xfer:" + xfer
}

// pushChunk pushes one chunk of transfer xfer, waiting while the list is
// full (ChunkWait at most).
func (c *Conn) pushChunk(ctx context.Context, id, xfer string, kind byte, data []byte) error {
	key := c.xferKey(id, xfer)
	deadline := time.Now().Add(ChunkWait)
	for {
		n, err := c.rdb.LLen(ctx, key).Result()
		if err != nil {
			return err
		}
		if n < MaxChunksQueued {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("session %s: the other side of the transfer took no chunk for %s", id, ChunkWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	b := make([]byte, 0, 1+len(data))
	b = append(append(b, kind), data...)
	p := c.rdb.Pipeline()
	p.RPush(ctx, key, b)
	p.Expire(ctx, key, AnswerTTL)
	_, err := p.Exec(ctx)
	return err
}

// errAborted: the sender gave the transfer up.
var errAborted = errors.New("the transfer was aborted by its sender")

// popChunk pops the next chunk of transfer xfer, waiting ChunkWait at
// most: its data, or io.EOF at its end.
func (c *Conn) popChunk(ctx context.Context, id, xfer string) ([]byte, error) {
	res, err := c.rdb.BLPop(ctx, ChunkWait, c.xferKey(id, xfer)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("session %s: no chunk of the transfer came for %s", id, ChunkWait)
	}
	if err != nil {
		return nil, err
	}
	b := []byte(res[1])
	if len(b) == 0 {
		return nil, errAborted
	}
	switch b[0] {
	case chunkData:
		return b[1:], nil
	case chunkEnd:
		return nil, io.EOF
	}
	return nil, errAborted
}

// ChunkReader reads transfer xfer of session id: the worker's side of an
// upload.
type ChunkReader struct {
	c       *Conn
	ctx     context.Context
	id, x   string
	buf     []byte
	err     error
	Payload int64 // bytes read so far
}

// Chunks returns the reader of transfer xfer of session id.
func (c *Conn) Chunks(ctx context.Context, id, xfer string) *ChunkReader {
	return &ChunkReader{c: c, ctx: ctx, id: id, x: xfer}
}

func (r *ChunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.buf, r.err = r.c.popChunk(r.ctx, r.id, r.x)
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.Payload += int64(n)
	return n, nil
}

// Drop removes what is left of transfer xfer (a side that gave up).
func (c *Conn) Drop(ctx context.Context, id, xfer string) {
	_ = c.rdb.Del(ctx, c.xferKey(id, xfer)).Err()
}

// SendChunks sends r as transfer xfer of session id, ChunkBytes at a
// time, then its end (or an abort, when reading r fails): the worker's
// side of a download.
func (c *Conn) SendChunks(ctx context.Context, id, xfer string, r io.Reader) error {
	buf := make([]byte, ChunkBytes)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if perr := c.pushChunk(ctx, id, xfer, chunkData, buf[:n]); perr != nil {
				return perr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return c.pushChunk(ctx, id, xfer, chunkEnd, nil)
		}
		if err != nil {
			_ = c.pushChunk(ctx, id, xfer, chunkAbort, nil)
			return err
		}
	}
}

// Upload sends call (OpUpload, its Xfer set) and the bytes of body, at
// most max, in chunks, and waits up to wait for the answer once all are
// sent. A body of more than max bytes is aborted: 413.
func (c *Conn) Upload(ctx context.Context, id string, call Call, body io.Reader, max int64, wait time.Duration) (*Answer, error) {
	sent, err := c.send(ctx, id, call, wait)
	if err != nil {
		return nil, err
	}
	var n int64
	lr := io.LimitReader(body, max+1)
	perr := func() error {
		buf := make([]byte, ChunkBytes)
		for {
			k, err := io.ReadFull(lr, buf)
			n += int64(k)
			if n > max {
				return &Error{Status: http.StatusRequestEntityTooLarge, Field: "body", Msg: fmt.Sprintf("the file is more than %d bytes", max)}
			}
			if k > 0 {
				if done, _ := c.rdb.Exists(ctx, c.answerKey(id, call.ID)).Result(); done > 0 {
					return nil // the worker answered early (a full workspace): its answer says
				}
				if err := c.pushChunk(ctx, id, call.Xfer, chunkData, buf[:k]); err != nil {
					return err
				}
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return c.pushChunk(ctx, id, call.Xfer, chunkEnd, nil)
			}
			if err != nil {
				return err
			}
		}
	}()
	if perr != nil {
		_ = c.pushChunk(context.WithoutCancel(ctx), id, call.Xfer, chunkAbort, nil)
		a, err := c.await(ctx, id, call.ID, sent, wait)
		if err == nil {
			err = perr
		}
		return a, err
	}
	return c.await(ctx, id, call.ID, sent, wait)
}

// Download sends call (OpDownload, its Xfer set), waits up to wait for
// its answer (the file's size; or why not) and then copies the file's
// chunks to w as they come.
func (c *Conn) Download(ctx context.Context, id string, call Call, wait time.Duration, w func(*Answer) (io.Writer, error)) (*Answer, error) {
	sent, err := c.send(ctx, id, call, wait)
	if err != nil {
		return nil, err
	}
	a, err := c.await(ctx, id, call.ID, sent, wait)
	if err != nil {
		return a, err
	}
	out, err := w(a)
	if err != nil {
		c.Drop(ctx, id, call.Xfer)
		return a, err
	}
	_, err = io.Copy(out, c.Chunks(ctx, id, call.Xfer))
	return a, err
}
