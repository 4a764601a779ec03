package approve_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/internal/tracing"
)

// memSink is a Sink in memory.
type memSink struct {
	mu  sync.Mutex
	got map[string]int // task id → files published
}

func (s *memSink) Publish(_ context.Context, m *approve.Manifest, files map[string][]byte) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.got[m.TaskID]; ok {
		return false, nil
	}
	s.got[m.TaskID] = len(files)
	return true, nil
}

func (s *memSink) Where(runID, taskID string) string { return "mem:" + runID + "/" + taskID }

// TestDecisionAndPromotionSpans: an approval keeps the traceparent of
// the span that parked it; its accept, reject and promotion are that
// span's children, in the run's trace, linked to the decider's span of
// another trace; a decision that did not take effect makes no span; an
// approval parked without one hangs its spans below the caller's.
func TestDecisionAndPromotionSpans(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	st, _, q := approvetest.Store(t, approve.Options{TracerProvider: tp})
	ctx := context.Background()
	const parkedTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	parked := tracing.Parse(parkedTP)
	decider := tracing.Parse("00-11111111111111111111111111111111-2222222222222222-01")
	deciderCtx := trace.ContextWithSpanContext(ctx, decider)

	a, data := sample("ap-tr-1", q)
	a.TraceParent, a.ResultSHA256 = parkedTP, digest(a.Result)
	park(t, st, a, data)
	if got, err := st.Get(ctx, a.ID); err != nil || got.TraceParent != parkedTP {
		t.Fatalf("Get: trace_parent %q, %v", got.TraceParent, err)
	}
	if _, err := st.Accept(deciderCtx, a.ID, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Accept(deciderCtx, a.ID, "bob", ""); !errors.Is(err, approve.ErrAlreadyDecided) {
		t.Fatalf("second accept: %v", err)
	}
	p := &approve.Promoter{Store: st, Sink: &memSink{got: map[string]int{}}, Worker: "test"}
	if _, published, err := p.Promote(ctx, a.ID); err != nil || !published {
		t.Fatalf("Promote: %v, %v", published, err)
	}
	b, data := sample("ap-tr-2", q)
	b.TraceParent = parkedTP
	park(t, st, b, data)
	if _, err := st.Reject(ctx, b.ID, "carol", "no"); err != nil {
		t.Fatal(err)
	}
	c, data := sample("ap-tr-3", q)
	park(t, st, c, data) // no traceparent
	if _, err := st.Accept(deciderCtx, c.ID, "dave", ""); err != nil {
		t.Fatal(err)
	}

	spans := rec.Ended()
	type want struct {
		name, approval string
		trace          trace.TraceID
		parent         trace.SpanID
		link           bool
	}
	wants := []want{
		{tracing.SpanAccept, a.ID, parked.TraceID(), parked.SpanID(), true},
		{tracing.SpanPromote, a.ID, parked.TraceID(), parked.SpanID(), false},
		{tracing.SpanReject, b.ID, parked.TraceID(), parked.SpanID(), false},
		{tracing.SpanAccept, c.ID, decider.TraceID(), decider.SpanID(), false},
	}
	if len(spans) != len(wants) {
		for _, s := range spans {
			t.Logf("span %s %v", s.Name(), s.Attributes())
		}
		t.Fatalf("%d spans, want %d (none for the decision that did not take effect)", len(spans), len(wants))
	}
	for i, w := range wants {
		s := spans[i]
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if s.Name() != w.name || attrs[string(tracing.AttrApprovalID)] != w.approval ||
			s.SpanContext().TraceID() != w.trace || s.Parent().SpanID() != w.parent {
			t.Errorf("span %d: %s of %s, trace %s parent %s; want %s of %s, trace %s parent %s", i,
				s.Name(), attrs[string(tracing.AttrApprovalID)], s.SpanContext().TraceID(), s.Parent().SpanID(),
				w.name, w.approval, w.trace, w.parent)
		}
		if linked := len(s.Links()) == 1 && s.Links()[0].SpanContext.SpanID() == decider.SpanID(); linked != w.link {
			t.Errorf("span %d (%s): links %v, want the decider's: %v", i, s.Name(), s.Links(), w.link)
		}
		if attrs[string(tracing.AttrTaskID)] != "task-"+w.approval || attrs[string(tracing.AttrQueue)] != q {
			t.Errorf("span %d: attributes %v", i, attrs)
		}
		if s.Name() == tracing.SpanPromote {
			// The result and the one artifact of sample.
			if attrs[string(tracing.AttrPublished)] != "true" || attrs[string(tracing.AttrArtifacts)] != "1" ||
				attrs[string(tracing.AttrBytes)] != strconv.Itoa(len(a.Result)+int(a.Artifacts[0].Bytes)) {
				t.Errorf("promote span attributes %v", attrs)
			}
		}
	}
}
