package fetch

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
	"time"
)

// TestHashPipe: whatever the sizes and the way it is drained (Read or
// WriteTo), the pipe gives the source's bytes in order and their hash.
func TestHashPipe(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{0, 1, pipeBufSize - 1, pipeBufSize, pipeBufSize + 1, 3*pipeBufSize + 17, 9 * pipeBufSize} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		want := sha256.Sum256(data)
		for _, mode := range []string{"read", "writeto", "one byte source"} {
			var src io.Reader = bytes.NewReader(data)
			if mode == "one byte source" {
				src = iotest.OneByteReader(src)
			}
			h := sha256.New()
			p := newHashPipe(src, h)
			var got bytes.Buffer
			var err error
			if mode == "writeto" {
				_, err = p.WriteTo(&got)
			} else {
				_, err = io.Copy(&got, struct{ io.Reader }{p}) // Read only
			}
			p.Close()
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", size, mode, err)
			}
			if !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("%d bytes, %s: got %d bytes, not the source's", size, mode, got.Len())
			}
			if sum := h.Sum(nil); !bytes.Equal(sum, want[:]) {
				t.Fatalf("%d bytes, %s: hash %x, want %x", size, mode, sum, want)
			}
		}
	}
}

// TestHashPipeError: a source's error reaches the reader after the bytes
// before it.
func TestHashPipeError(t *testing.T) {
	boom := errors.New("connection reset")
	src := io.MultiReader(bytes.NewReader([]byte("partial")), iotest.ErrReader(boom))
	p := newHashPipe(src, sha256.New())
	defer p.Close()
	got, err := io.ReadAll(struct{ io.Reader }{p})
	if !errors.Is(err, boom) || string(got) != "partial" {
		t.Fatalf("got %q, %v; want \"partial\", %v", got, err, boom)
	}
}

// TestHashPipeWriteError: a failing destination stops WriteTo with its
// error; Close then ends the goroutines even with the source still open.
func TestHashPipeWriteError(t *testing.T) {
	pr, pw := io.Pipe()
	go func() {
		for {
			if _, err := pw.Write(make([]byte, 64<<10)); err != nil {
				return
			}
		}
	}()
	p := newHashPipe(pr, sha256.New())
	full := errors.New("no space")
	_, err := p.WriteTo(failAfter{n: 100 << 10, err: full})
	if !errors.Is(err, full) {
		t.Fatalf("WriteTo: %v, want %v", err, full)
	}
	p.Close()
	pr.CloseWithError(errors.New("closed")) // as Fetch closes the body
	// The pipe's goroutines end: the reader's stops on the closed source.
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case _, ok := <-p.ready:
			if !ok {
				return
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the pipe's goroutines did not end after Close")
		}
		time.Sleep(time.Millisecond)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, f.err
	}
	return len(p), nil
}
