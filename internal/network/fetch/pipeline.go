package fetch

import (
	"hash"
	"io"
)

// Pipeline sizes: a few large buffers, so that a download holds at most
// pipeBuffers×pipeBufSize bytes in memory whatever its size.
const (
	pipeBuffers = 4
	pipeBufSize = 256 << 10
)

// hashPipe reads src, hashes it and hands it to Read in three stages that
// overlap: a goroutine reads the network into a buffer, another hashes the
// previous one, and the caller writes the one before. Buffers go round:
// free → read → hashed → consumed → free, so memory stays bounded.
type hashPipe struct {
	h      hash.Hash
	free   chan []byte
	toHash chan chunk
	ready  chan chunk
	stop   chan struct{}
	cur    chunk
	off    int
	done   bool
	err    error
}

type chunk struct {
	buf []byte // full buffer, for reuse
	n   int
	err error // the read's error after these bytes (io.EOF at the end)
}

// newHashPipe starts the pipeline; Close stops it.
func newHashPipe(src io.Reader, h hash.Hash) *hashPipe {
	p := &hashPipe{
		h: h, free: make(chan []byte, pipeBuffers), toHash: make(chan chunk, pipeBuffers),
		ready: make(chan chunk, pipeBuffers), stop: make(chan struct{}),
	}
	for range pipeBuffers {
		p.free <- make([]byte, pipeBufSize)
	}
	go p.read(src)
	go p.hash()
	return p
}

func (p *hashPipe) read(src io.Reader) {
	defer close(p.toHash)
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-p.stop:
			return
		}
		n, err := io.ReadAtLeast(src, buf, len(buf)/2)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		select {
		case p.toHash <- chunk{buf: buf, n: n, err: err}:
		case <-p.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *hashPipe) hash() {
	defer close(p.ready)
	for c := range p.toHash {
		p.h.Write(c.buf[:c.n])
		select {
		case p.ready <- c:
		case <-p.stop:
			return
		}
	}
}

// Read copies out the hashed bytes, in order.
func (p *hashPipe) Read(b []byte) (int, error) {
	for p.off == p.cur.n {
		if p.done {
			return 0, p.err
		}
		if p.cur.buf != nil {
			p.free <- p.cur.buf
			p.cur.buf = nil
		}
		c, ok := <-p.ready
		if !ok {
			p.done, p.err = true, io.ErrUnexpectedEOF // stopped
			return 0, p.err
		}
		p.cur, p.off = c, 0
		if c.err != nil {
			p.done, p.err = true, c.err
		}
	}
	n := copy(b, p.cur.buf[p.off:p.cur.n])
	p.off += n
	return n, nil
}

// WriteTo writes the hashed bytes to w straight from the pipeline's
// buffers.
func (p *hashPipe) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if p.off < p.cur.n {
			n, err := w.Write(p.cur.buf[p.off:p.cur.n])
			p.off += n
			total += int64(n)
			if err != nil {
				return total, err
			}
		}
		if p.done {
			if p.err == io.EOF {
				return total, nil
			}
			return total, p.err
		}
		if p.cur.buf != nil {
			p.free <- p.cur.buf
			p.cur.buf = nil
		}
		c, ok := <-p.ready
		if !ok {
			p.done, p.err = true, io.ErrUnexpectedEOF
			return total, p.err
		}
		p.cur, p.off = c, 0
		if c.err != nil {
			p.done, p.err = true, c.err
		}
	}
}

// Close stops the goroutines; the hash is complete only after Read
// returned io.EOF.
func (p *hashPipe) Close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
}
