//go:build linux

package sandbox

import (
	"os"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// KeepBudget is what a run may still keep of its steps' stdout and
// stderr, all steps and both streams together. Every byte a capture keeps
// is taken from it while it is read; once it is spent, bytes are counted
// (Capture.Total) and not kept (Capture.Truncated). The up to 3 bytes of
// a character cut at the end of what a stream keeps (see capture) are
// taken and not kept. It is safe for concurrent use.
type KeepBudget struct{ left atomic.Int64 }

// NewKeepBudget returns a budget of n bytes; n <= 0 keeps nothing.
func NewKeepBudget(n int64) *KeepBudget {
	b := &KeepBudget{}
	b.left.Store(max(n, 0))
	return b
}

// Left is what the budget may still keep.
func (b *KeepBudget) Left() int64 { return b.left.Load() }

// take takes up to n bytes from the budget and returns how many it got.
func (b *KeepBudget) take(n int64) int64 {
	for {
		left := b.left.Load()
		k := min(n, left)
		if k <= 0 {
			return 0
		}
		if b.left.CompareAndSwap(left, left-k) {
			return k
		}
	}
}

// outputTotal counts what a step writes to stdout and stderr together
// against limits.output_total. Past the limit it trips (the slot then
// asks the helper to kill the step's tree) and the captures stop reading
// until the step is over: a step that goes on writing blocks on a full
// pipe until it dies, so what is counted past the limit is at most what
// its pipes hold. A nil *outputTotal counts nothing.
type outputTotal struct {
	limit int64
	n     atomic.Int64
	once  sync.Once
	over  chan struct{} // closed when n passes limit
	done  chan struct{} // closed when the step is over (finish)
}

// newOutputTotal returns the counter of limit bytes; nil for no limit.
func newOutputTotal(limit int64) *outputTotal {
	if limit <= 0 {
		return nil
	}
	return &outputTotal{limit: limit, over: make(chan struct{}), done: make(chan struct{})}
}

// room is how much the next read of a stream may take, at most n: no
// more than one byte past the limit, so that the count at the trip is the
// limit plus one, whatever the size of the step's writes.
func (t *outputTotal) room(n int) int {
	if t == nil {
		return n
	}
	if left := t.limit - t.n.Load(); left >= 0 && left < int64(n) {
		return int(left) + 1
	}
	return n
}

// add counts n bytes just read; past the limit it trips, and waits until
// the step is over before the capture reads on.
func (t *outputTotal) add(n int) {
	if t == nil {
		return
	}
	if t.n.Add(int64(n)) > t.limit {
		t.once.Do(func() { close(t.over) })
		<-t.done
	}
}

// tripped is closed when the step has written more than the limit; nil
// (never ready) for no limit.
func (t *outputTotal) tripped() <-chan struct{} {
	if t == nil {
		return nil
	}
	return t.over
}

// exceeded reports whether the step wrote more than the limit.
func (t *outputTotal) exceeded() bool { return t != nil && t.n.Load() > t.limit }

// finish says the step is over (its helper answered, or is gone): the
// captures drain what its pipes still hold, up to EOF.
func (t *outputTotal) finish() {
	if t != nil {
		select {
		case <-t.done:
		default:
			close(t.done)
		}
	}
}

// capture keeps the first max bytes of r, as far as keep (nil: no run
// budget) allows, and counts the rest until EOF; total (nil: no limit)
// counts both streams of the step together. What it keeps ends on a
// character boundary when the stream was cut in the middle of a UTF-8
// character and the rest is valid UTF-8: text stays text in the record.
// It holds no more memory than what it keeps (and one read buffer).
func capture(r *os.File, max int64, keep *KeepBudget, total *outputTotal, live func([]byte)) Capture {
	defer r.Close()
	c := Capture{live: live}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf[:total.room(len(buf))])
		if n > 0 {
			c.Total += int64(n)
			c.keep(buf[:n], max, keep)
			total.add(n)
		}
		if err != nil {
			break
		}
	}
	c.Truncated = c.Total > int64(len(c.Data))
	if c.Truncated {
		// The bytes of the cut character stay taken from keep: a budget
		// once spent stays spent (Left is 0), for whoever reads it.
		c.Data = c.Data[:len(c.Data)-partialRune(c.Data)]
	}
	return c
}

// keep appends what it may of p: up to limit bytes in all, as far as b
// allows. Data grows by doubling, never past what the stream may still
// keep.
func (c *Capture) keep(p []byte, limit int64, b *KeepBudget) {
	k := min(int64(len(p)), limit-int64(len(c.Data)))
	if k <= 0 {
		return
	}
	if b != nil {
		if k = b.take(k); k == 0 {
			return
		}
	}
	need := int64(len(c.Data)) + k
	if need > int64(cap(c.Data)) {
		bound := limit
		if b != nil {
			bound = min(bound, need+b.Left())
		}
		size := max(min(max(2*int64(cap(c.Data)), need, 4096), bound), need)
		d := make([]byte, len(c.Data), size)
		copy(d, c.Data)
		c.Data = d
	}
	c.Data = append(c.Data, p[:k]...)
	if c.live != nil {
		c.live(c.Data[len(c.Data)-int(k):])
	}
}

// partialRune is how many bytes at the end of b are the start of a
// UTF-8 character cut short, when all that comes before is valid UTF-8;
// 0 otherwise (b ends on a boundary, or is not text anyway).
func partialRune(b []byte) int {
	// An incomplete character is at most UTFMax-1 bytes long.
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if utf8.FullRune(b[i:]) || !utf8.Valid(b[:i]) {
			return 0
		}
		return len(b) - i
	}
	return 0
}
