//go:build linux

package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/live"
)

// A step's output reaches whoever listens while the step runs (package
// live): what the record will keep of stdout and stderr, as the captures
// read it, secrets redacted, appended to the run's output stream in Redis
// every liveFlush. Nobody listening costs nothing: a step checks for a
// listener once it has run for liveFirstLook (a step done before that
// sends nothing: its record has its output), then every liveLookEvery;
// what it read before a listener came is sent then.

const (
	liveFirstLook = 250 * time.Millisecond
	liveLookEvery = 2 * time.Second
	liveFlush     = 100 * time.Millisecond
)

// liveStep streams one step's output.
type liveStep struct {
	w       *Worker
	taskID  string
	step    string
	secrets *secrets.Set

	mu sync.Mutex
	// held is, per stream, what was read and not redacted yet (a tail
	// that may begin a secret's value); ready what was redacted and not
	// sent yet. Both are bytes the record keeps: at most its budget,
	// however many reads brought them.
	held     [3][]byte
	ready    [3][]byte
	listened bool
	stop     chan struct{}
	done     chan struct{}
}

// startLive starts the stream of step's output for run taskID.
func (w *Worker) startLive(taskID, step string, sec *secrets.Set) *liveStep {
	l := &liveStep{w: w, taskID: taskID, step: step, secrets: sec, stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l
}

// add takes bytes a capture kept (sandbox.Step.Live).
func (l *liveStep) add(stream int, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[stream] = append(l.held[stream], p...)
	l.release(stream, false, false)
}

// release moves what of stream's held bytes can no longer be the start of
// a secret's value to ready, redacted; at the end, all of it, redacted
// then, for a stream cut at its cap, cut as the record cuts it (TrimCut
// after redaction, redactCaptured).
func (l *liveStep) release(stream int, end, truncated bool) {
	b := l.held[stream]
	cut := len(b)
	if !end {
		if !l.secrets.Empty() {
			cut = len(b) - l.secrets.Longest() + 1
		}
		// Neither inside a value that is whole in b (it goes out redacted
		// with what follows it) nor inside a character: each step back
		// may call for the other, until neither moves the cut.
		for {
			next := l.secrets.Straddle(b, cut)
			if next > 0 {
				next -= partialRuneEnd(b[:next])
			}
			if next == cut {
				break
			}
			cut = next
		}
	}
	if cut <= 0 {
		return
	}
	out, _ := l.secrets.RedactBytes(bytes.Clone(b[:cut]))
	if end && truncated {
		out = l.secrets.TrimCut(out)
	}
	l.held[stream] = append(b[:0:0], b[cut:]...)
	l.ready[stream] = append(l.ready[stream], out...)
}

// partialRuneEnd is how many bytes at the end of b begin a character not
// yet whole (held for the next read, so that text stays text).
func partialRuneEnd(b []byte) int {
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return 0
			}
			return len(b) - i
		}
	}
	return 0
}

// encodeOutput is one piece of output: text, or base64 when it is not
// valid UTF-8, as the record's steps say.
func encodeOutput(step string, stream int, p []byte) live.Output {
	o := live.Output{Step: step, Stream: "stdout"}
	if stream == sandbox.Stderr {
		o.Stream = "stderr"
	}
	if utf8.Valid(p) {
		o.Data = string(p)
	} else {
		o.Data, o.Encoding = base64.StdEncoding.EncodeToString(p), "base64"
	}
	return o
}

// loop looks for a listener and sends what is ready, until finish.
func (l *liveStep) loop() {
	defer close(l.done)
	ctx := context.Background()
	start := time.Now()
	nextLook := start.Add(liveFirstLook)
	t := time.NewTicker(liveFlush)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if !l.listened && l.w.live != nil && time.Now().After(nextLook) {
			l.listened = l.w.live.Listened(ctx, l.taskID)
			nextLook = time.Now().Add(liveLookEvery)
		}
		if l.listened {
			l.send(ctx)
		}
	}
}

// send appends what is ready to the run's output stream: one piece per
// stream.
func (l *liveStep) send(ctx context.Context) {
	l.mu.Lock()
	var outs []live.Output
	for _, n := range []int{sandbox.Stdout, sandbox.Stderr} {
		if len(l.ready[n]) > 0 {
			outs = append(outs, encodeOutput(l.step, n, l.ready[n]))
			l.ready[n] = nil
		}
	}
	l.mu.Unlock()
	if len(outs) == 0 {
		return
	}
	if err := l.w.live.Append(ctx, l.taskID, outs); err != nil {
		l.w.log.Warn().Err(err).Str("task_id", l.taskID).Msg("live output")
	}
}

// finish ends the stream once the step is over: the held tails go out if
// anyone listened, cut as the record cuts a truncated stream (a step the
// sandbox could not report, failed, counts as cut).
func (l *liveStep) finish(res sandbox.Result, failed bool) {
	close(l.stop)
	<-l.done
	if !l.listened {
		return
	}
	l.mu.Lock()
	l.release(sandbox.Stdout, true, failed || res.Stdout.Truncated)
	l.release(sandbox.Stderr, true, failed || res.Stderr.Truncated)
	l.mu.Unlock()
	l.send(context.Background())
}
