package bqotel

import (
	"context"
	"errors"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// Sender wraps next so that every message sent through it gets a producer
// span ("send <queue>") whose context is injected into the message's
// headers. Build both the Publisher and the Consumer on the wrapped sender,
// so retry and dead-letter copies are traced too.
//
// The span's parent is the span in the Send context (the caller's); for the
// consumer's copies, which are sent outside any handler, it is the consumer
// span the middleware left in the copy's headers. A copy's span links to
// the creation context of the message it copies.
//
// The wrapper reports the size limit of next (driver.SizeLimiter), and
// Unwrap returns next.
func (t *Telemetry) Sender(next driver.Sender) driver.Sender {
	return &sender{t: t, next: next}
}

type sender struct {
	t    *Telemetry
	next driver.Sender
}

// Unwrap returns the wrapped sender.
func (s *sender) Unwrap() driver.Sender { return s.next }

// MaxMessageBytes implements driver.SizeLimiter with the wrapped sender's
// limit (0 when it has none).
func (s *sender) MaxMessageBytes(queue string) int {
	if l, ok := s.next.(driver.SizeLimiter); ok {
		return l.MaxMessageBytes(queue)
	}
	return 0
}

// RetainsNothing implements driver.Unretaining for the sender it wraps,
// which it answers for: true when that sender keeps nothing of a Send
// once it returned, so that a Publisher reuses a batch's memory through
// the wrapper as it would without it. The wrapper keeps nothing itself:
// it gives each message a new headers map and ends its spans before Send
// returns.
func (s *sender) RetainsNothing() bool {
	u, ok := s.next.(interface{ RetainsNothing() bool })
	return ok && u.RetainsNothing()
}

// Close closes the wrapped sender when it has a Close method.
func (s *sender) Close(ctx context.Context) error {
	switch c := s.next.(type) {
	case interface{ Close(context.Context) error }:
		return c.Close(ctx)
	case interface{ Close() error }:
		return c.Close()
	}
	return nil
}

// Send implements driver.Sender.
func (s *sender) Send(ctx context.Context, msgs []*driver.Message) error {
	spans := make([]trace.Span, len(msgs))
	for i, m := range msgs {
		spans[i] = s.t.startProducer(ctx, m)
	}
	err := s.next.Send(ctx, msgs)
	var be *driver.BatchError
	batch := errors.As(err, &be)
	for i, sp := range spans {
		e := err
		if batch {
			e = be.Failed(i)
		}
		if e != nil {
			sp.RecordError(e)
			sp.SetStatus(codes.Error, e.Error())
			sp.SetAttributes(semconv.ErrorType(e))
		}
		sp.End()
	}
	return err
}

func (t *Telemetry) startProducer(ctx context.Context, m *driver.Message) trace.Span {
	hop := HopPublish
	switch {
	case m.DeadLetter != nil:
		hop = HopDeadLetter
	case m.Origin != nil:
		hop = HopRetry
	}
	attrs := []attribute.KeyValue{
		t.system,
		semconv.MessagingDestinationName(m.Queue),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingMessageBodySize(len(m.Body)),
		AttrHop.String(hop),
	}
	if e := m.Envelope; e != nil {
		attrs = append(attrs, semconv.MessagingMessageID(e.Meta.ID), AttrURN.String(e.URN), AttrAttempts.Int(e.Attempts))
		if e.TraceID != "" {
			attrs = append(attrs, semconv.MessagingMessageConversationID(e.TraceID))
		}
	}
	if m.DeadLetter != nil {
		attrs = append(attrs, AttrReason.String(string(m.DeadLetter.Reason)))
	}
	if m.Key != "" && t.system.Value.AsString() == SystemKafka {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(m.Key))
	}
	if m.Headers[queue.HeaderReplay] == "1" {
		attrs = append(attrs, AttrReplay.Bool(true))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}

	parent := ctx
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// A copy sent by the consumer: its headers carry the consumer span
		// of the attempt that failed.
		if sc := t.extract(m.Headers); sc.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	if m.Origin != nil {
		if sc := t.extract(m.Origin.Headers); sc.IsValid() && !sc.Equal(trace.SpanContextFromContext(parent)) {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrHop.String(hop)}}))
		}
	}
	sctx, span := t.tracer.Start(parent, "send "+m.Queue, opts...)
	h := make(map[string]string, len(m.Headers)+2)
	maps.Copy(h, m.Headers)
	t.prop.Inject(sctx, propagation.MapCarrier(h))
	m.Headers = h
	return span
}

// extract returns the span context carried in headers (invalid when none).
func (t *Telemetry) extract(h map[string]string) trace.SpanContext {
	if len(h) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(h)))
}

// Middleware runs every handler inside a consumer span ("process <queue>"),
// the child of the producer span whose context the message's headers carry
// (a link to it when the handler's context already has a span). The handler's
// context holds the span, so what it publishes continues the trace.
//
// A handler error is recorded on the span, and the message's headers are
// pointed at the span, so the retry or dead-letter copy the consumer then
// sends is its child. queue.ErrSkip is not an error: the span gets
// babelqueue.outcome "skipped".
func (t *Telemetry) Middleware() queue.Middleware {
	return func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error {
			attrs := []attribute.KeyValue{
				t.system,
				semconv.MessagingDestinationName(m.Queue),
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingOperationName("process"),
			}
			if d := m.Delivery; d != nil {
				attrs = append(attrs, semconv.MessagingMessageBodySize(len(d.Body)))
			}
			if e := m.Envelope; e != nil {
				attrs = append(attrs, semconv.MessagingMessageID(e.Meta.ID), AttrURN.String(e.URN), AttrAttempts.Int(e.Attempts))
				if e.TraceID != "" {
					attrs = append(attrs, semconv.MessagingMessageConversationID(e.TraceID))
				}
			}
			if queue.IsReplay(m) {
				attrs = append(attrs, AttrReplay.Bool(true))
			}
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
			parent := ctx
			if sc := t.extract(m.Headers); sc.IsValid() {
				if trace.SpanContextFromContext(ctx).IsValid() {
					opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
				} else {
					parent = trace.ContextWithRemoteSpanContext(ctx, sc)
				}
			}
			sctx, span := t.tracer.Start(parent, "process "+m.Queue, opts...)
			defer span.End()

			where := metricAttrs(t.system, semconv.MessagingDestinationName(m.Queue))
			t.inflight.Add(sctx, 1, where)
			err := queue.Recover()(next)(sctx, m) // a panic is recorded as the error it becomes
			t.inflight.Add(sctx, -1, where)
			switch {
			case err == nil:
			case errors.Is(err, queue.ErrSkip):
				span.SetAttributes(AttrOutcome.String(string(queue.OutcomeSkipped)))
			default:
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				span.SetAttributes(semconv.ErrorType(err))
				// The copy the consumer sends next is this span's child.
				h := make(map[string]string, len(m.Headers)+2)
				maps.Copy(h, m.Headers)
				t.prop.Inject(sctx, propagation.MapCarrier(h))
				m.Headers = h
			}
			return err
		}
	}
}
