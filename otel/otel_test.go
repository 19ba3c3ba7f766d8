package bqotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
	bqotel "github.com/babelqueue/transports/otel"
)

const urn = "urn:babel:orders:created"

type rig struct {
	tp     *sdktrace.TracerProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tel    *bqotel.Telemetry
	broker *memqueue.Broker
}

func newRig(t *testing.T, opts ...memqueue.Option) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), broker: memqueue.New(opts...)}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	tel, err := bqotel.New(bqotel.WithTracerProvider(r.tp), bqotel.WithMeterProvider(mp), bqotel.WithSystem(bqotel.SystemKafka))
	if err != nil {
		t.Fatal(err)
	}
	r.tel = tel
	return r
}

func (r *rig) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if name == "" || s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, key string, want any) {
	t.Helper()
	v, ok := attr(s, key)
	if !ok {
		t.Errorf("%s: no attribute %s", s.Name(), key)
		return
	}
	if got := v.AsInterface(); got != want {
		t.Errorf("%s: %s = %v (%T), want %v (%T)", s.Name(), key, got, got, want, want)
	}
}

// collect returns the sum of a counter or the count of a histogram per
// attribute set, keyed by the values of keys joined with "|".
func (r *rig) collect(t *testing.T, name string, keys ...string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	label := func(set attribute.Set) string {
		var parts []string
		for _, k := range keys {
			v, _ := set.Value(attribute.Key(k))
			parts = append(parts, v.String())
		}
		return strings.Join(parts, "|")
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[label(p.Attributes)] += int64(p.Count)
				}
			}
		}
	}
	return out
}

// One trace holds the publish, every attempt and the dead-letter copy: each
// copy's producer span is the child of the consumer span that failed and
// links to the creation context of the message it copies.
func TestTraceAcrossRetryAndDeadLetter(t *testing.T) {
	r := newRig(t)
	snd := r.tel.Sender(r.broker.Sender())
	pub := queue.NewPublisher(snd, r.tel.PublisherOptions()...)

	ctx, root := r.tp.Tracer("app").Start(context.Background(), "checkout")
	env, err := pub.Publish(ctx, "orders", urn, map[string]any{"id": 7})
	if err != nil {
		t.Fatal(err)
	}
	root.End()

	drivertest.StartConsumer(t, r.broker.Receiver("orders"), snd, urn, func(context.Context, *queue.Message) error {
		return errors.New("payment service down")
	}, append(r.tel.ConsumerOptions(), queue.WithMaxAttempts(3), queue.WithDeadLetter(""), queue.WithRetryMode(queue.RetryRepublish))...)
	drivertest.WaitUntil(t, 10*time.Second, "the dead-letter copy", func() bool { return r.broker.Len("orders.dlq") == 1 })
	drivertest.WaitUntil(t, 5*time.Second, "three consumer spans ended", func() bool { return len(r.ended("process orders")) == 3 })
	// The consumer records an attempt's outcome once it has settled it:
	// after the dead-letter copy is out and the consumer span has ended.
	drivertest.WaitUntil(t, 5*time.Second, "the dead-lettered outcome recorded", func() bool {
		return r.collect(t, "babelqueue.dead_letters", "babelqueue.dead_letter.reason")["failed"] == 1 &&
			r.collect(t, "messaging.client.consumed.messages", "babelqueue.outcome")["dead_lettered"] == 1
	})

	sends, procs := r.ended("send orders"), r.ended("process orders")
	dlq := r.ended("send orders.dlq")
	if len(sends) != 3 || len(dlq) != 1 {
		t.Fatalf("%d send orders spans and %d send orders.dlq spans, want 3 and 1", len(sends), len(dlq))
	}
	// The chain, in order: P0 → C0 → P1 → C1 → P2 → C2 → Pdlq.
	chain := []sdktrace.ReadOnlySpan{sends[0], procs[0], sends[1], procs[1], sends[2], procs[2], dlq[0]}
	if got := chain[0].Parent().SpanID(); got != root.SpanContext().SpanID() {
		t.Errorf("the publish span's parent is %s, want the caller's span %s", got, root.SpanContext().SpanID())
	}
	for i, s := range chain {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("span %d (%s) is in trace %s, want %s", i, s.Name(), s.SpanContext().TraceID(), root.SpanContext().TraceID())
		}
		if i > 0 && s.Parent().SpanID() != chain[i-1].SpanContext().SpanID() {
			t.Errorf("span %d (%s) has parent %s, want span %d (%s)", i, s.Name(), s.Parent().SpanID(), i-1, chain[i-1].Name())
		}
		wantAttr(t, s, "messaging.system", "kafka")
		wantAttr(t, s, "messaging.message.id", env.Meta.ID)
		wantAttr(t, s, "messaging.message.conversation_id", env.TraceID)
		wantAttr(t, s, "babelqueue.urn", urn)
	}
	for i, p := range procs {
		if p.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process span %d kind %v", i, p.SpanKind())
		}
		wantAttr(t, p, "messaging.operation.type", "process")
		wantAttr(t, p, "messaging.destination.name", "orders")
		wantAttr(t, p, "babelqueue.message.attempts", int64(i))
		if p.Status().Code != codes.Error || !strings.Contains(p.Status().Description, "payment service down") {
			t.Errorf("process span %d status %+v", i, p.Status())
		}
	}
	for i, s := range []sdktrace.ReadOnlySpan{sends[1], sends[2], dlq[0]} {
		hop := "retry"
		if i == 2 {
			hop = "dead_letter"
		}
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("%s kind %v", s.Name(), s.SpanKind())
		}
		wantAttr(t, s, "babelqueue.hop", hop)
		wantAttr(t, s, "messaging.operation.type", "send")
		// Each copy links to the producer span of the message it copies.
		links := s.Links()
		if len(links) != 1 || links[0].SpanContext.SpanID() != chain[2*i].SpanContext().SpanID() {
			t.Errorf("%s (%s) links %v, want the creation context %s", s.Name(), hop, links, chain[2*i].SpanContext().SpanID())
		}
	}
	wantAttr(t, sends[0], "babelqueue.hop", "publish")
	wantAttr(t, dlq[0], "babelqueue.dead_letter.reason", "failed")

	// The dead-letter copy carries the context of its producer span.
	var carried propagation.MapCarrier = map[string]string{}
	for _, b := range r.broker.Bodies("orders.dlq") {
		if !strings.Contains(string(b), `"dead_letter"`) {
			t.Fatalf("dead-letter copy without its block: %s", b)
		}
	}
	dq := r.broker.Receiver("orders.dlq")
	ds, err := dq.Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive dlq: %v %d", err, len(ds))
	}
	carried = ds[0].Headers
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carried))
	if sc.SpanID() != dlq[0].SpanContext().SpanID() {
		t.Errorf("the dead-letter copy's traceparent %q names span %s, want %s", carried.Get("traceparent"), sc.SpanID(), dlq[0].SpanContext().SpanID())
	}

	if got := r.collect(t, "messaging.client.sent.messages", "messaging.destination.name"); got["orders"] != 1 || len(got) != 1 {
		t.Errorf("sent.messages %v, want orders:1 (copies are not publishes)", got)
	}
	if got := r.collect(t, "messaging.client.consumed.messages", "babelqueue.outcome"); got["retried"] != 2 || got["dead_lettered"] != 1 {
		t.Errorf("consumed.messages by outcome %v, want retried:2 dead_lettered:1", got)
	}
	if got := r.collect(t, "messaging.process.duration", "babelqueue.outcome"); got["retried"] != 2 || got["dead_lettered"] != 1 {
		t.Errorf("process.duration counts %v", got)
	}
	if got := r.collect(t, "babelqueue.retries", "messaging.destination.name"); got["orders"] != 2 {
		t.Errorf("retries %v, want orders:2", got)
	}
	if got := r.collect(t, "babelqueue.dead_letters", "babelqueue.dead_letter.reason"); got["failed"] != 1 {
		t.Errorf("dead_letters %v, want failed:1", got)
	}
	if got := r.collect(t, "babelqueue.process.in_flight", "messaging.destination.name"); got["orders"] != 0 {
		t.Errorf("in_flight %v after everything settled, want 0", got)
	}
}

// Every outcome reaches the metrics, skipped included, and a skip is not an
// error on the span; a handler's publish continues the consumer's trace.
func TestOutcomesAndHandlerPublish(t *testing.T) {
	r := newRig(t)
	snd := r.tel.Sender(r.broker.Sender())
	pub := queue.NewPublisher(snd, r.tel.PublisherOptions()...)
	for i := range 3 {
		if _, err := pub.Publish(context.Background(), "orders", urn, map[string]any{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		handled int
	)
	drivertest.StartConsumer(t, r.broker.Receiver("orders"), snd, urn, func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		handled++
		n := handled
		mu.Unlock()
		switch n {
		case 1:
			return queue.ErrSkip
		case 2:
			_, err := pub.Publish(ctx, "shipping", "urn:babel:shipping:requested", nil, queue.ContinueFrom(m))
			return err
		}
		return nil
	}, append(r.tel.ConsumerOptions(), queue.WithConcurrency(1))...)
	drivertest.WaitUntil(t, 10*time.Second, "three handled", func() bool { return len(r.ended("process orders")) == 3 })

	procs := r.ended("process orders")
	if _, ok := attr(procs[0], "babelqueue.outcome"); !ok || procs[0].Status().Code == codes.Error {
		t.Errorf("skipped span: outcome attribute %v, status %+v", ok, procs[0].Status())
	}
	ship := r.ended("send shipping")
	if len(ship) != 1 || ship[0].Parent().SpanID() != procs[1].SpanContext().SpanID() {
		t.Fatalf("the handler's publish is not the consumer span's child: %d spans", len(ship))
	}
	drivertest.WaitUntil(t, 5*time.Second, "outcomes recorded", func() bool {
		got := r.collect(t, "messaging.client.consumed.messages", "babelqueue.outcome")
		return got["skipped"] == 1 && got["acked"] == 2
	})
	if got := r.collect(t, "messaging.client.sent.messages", "messaging.destination.name"); got["orders"] != 3 || got["shipping"] != 1 {
		t.Errorf("sent.messages %v", got)
	}
}

// A failed copy publish is a settle error in the metrics and an error on its
// producer span; the message is released, not lost.
func TestSettleErrors(t *testing.T) {
	r := newRig(t)
	faulty := drivertest.NewFaultySender(r.broker.Sender())
	snd := r.tel.Sender(faulty)
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), "orders", urn, nil); err != nil {
		t.Fatal(err)
	}
	faulty.FailSends("orders", 1) // the first retry copy
	var calls sync.Map
	drivertest.StartConsumer(t, r.broker.Receiver("orders"), snd, urn, func(_ context.Context, m *queue.Message) error {
		n, _ := calls.LoadOrStore(m.Envelope.Attempts, 0)
		calls.Store(m.Envelope.Attempts, n.(int)+1)
		if m.Envelope.Attempts == 0 {
			return errors.New("boom")
		}
		return nil
	}, append(r.tel.ConsumerOptions(), queue.WithMaxAttempts(5), queue.WithRetryMode(queue.RetryRepublish))...)
	drivertest.WaitUntil(t, 10*time.Second, "the retry handled", func() bool { _, ok := calls.Load(1); return ok })
	if got := r.collect(t, "babelqueue.settle.errors", "babelqueue.settle.operation"); got["retry-publish"] != 1 {
		t.Errorf("settle.errors %v, want retry-publish:1", got)
	}
	var failed int
	for _, s := range r.ended("send orders") {
		if s.Status().Code == codes.Error {
			failed++
			wantAttr(t, s, "error.type", "*errors.errorString")
		}
	}
	if failed != 1 {
		t.Errorf("%d producer spans with an error, want 1", failed)
	}
}

// In a batch, only the messages that failed get an error on their span.
func TestBatchSpans(t *testing.T) {
	r := newRig(t, memqueue.WithMaxMessageBytes("small", 64))
	pub := queue.NewPublisher(r.tel.Sender(r.broker.Sender()))
	var batch []queue.Outgoing
	for _, q := range []string{"big", "small", "big"} {
		env, err := core.New(urn, map[string]any{"pad": strings.Repeat("x", 100)}, core.WithQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, queue.Outgoing{Envelope: env})
	}
	err := pub.PublishBatch(context.Background(), batch)
	var be *driver.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("PublishBatch: %v, want a *driver.BatchError", err)
	}
	if n := len(r.ended("")); n != 3 {
		t.Fatalf("%d spans, want one per message", n)
	}
	for _, s := range r.ended("") {
		isErr := s.Status().Code == codes.Error
		if isErr != (s.Name() == "send small") {
			t.Errorf("%s: error status %v", s.Name(), isErr)
		}
	}
}

type lagger map[string]int64

func (l lagger) Lag() map[string]int64 { return l }

// ObserveConsumer reports the lag per queue, until unregistered.
func TestObserveConsumerLag(t *testing.T) {
	r := newRig(t)
	reg, err := r.tel.ObserveConsumer(lagger{"orders": 42, "payments": 3})
	if err != nil {
		t.Fatal(err)
	}
	got := r.collect(t, "babelqueue.consumer.lag", "messaging.destination.name")
	if got["orders"] != 42 || got["payments"] != 3 {
		t.Errorf("lag %v", got)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	// A *queue.Consumer is what it is meant for.
	var _ bqotel.Lagger = queue.NewConsumer(r.broker.Receiver("orders"), r.broker.Sender())
}

// The wrapper passes the size limit of the sender it wraps to the runtime.
func TestSenderForwardsSizeLimit(t *testing.T) {
	r := newRig(t, memqueue.WithMaxMessageBytes("orders", 300))
	snd := r.tel.Sender(r.broker.Sender())
	lim, ok := snd.(driver.SizeLimiter)
	if !ok || lim.MaxMessageBytes("orders") != 300 {
		t.Fatalf("size limit not forwarded")
	}
	if u, ok := snd.(interface{ Unwrap() driver.Sender }); !ok || u.Unwrap() == nil {
		t.Fatal("no Unwrap")
	}
}

// keepsNothing is a sender that says it keeps nothing of a Send.
type keepsNothing struct{ driver.Sender }

func (keepsNothing) RetainsNothing() bool { return true }

// The wrapper answers driver.Unretaining for the sender it wraps: a
// Publisher reuses its batches' memory through it only when the wrapped
// sender keeps nothing.
func TestSenderForwardsRetainsNothing(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct {
		next driver.Sender
		want bool
	}{
		{r.broker.Sender(), false}, // memqueue says nothing
		{keepsNothing{r.broker.Sender()}, true},
	} {
		u, ok := r.tel.Sender(c.next).(driver.Unretaining)
		if !ok || u.RetainsNothing() != c.want {
			t.Errorf("wrapping %T: RetainsNothing %v (implemented: %v), want %v", c.next, ok && u.RetainsNothing(), ok, c.want)
		}
	}
}

// WithPropagator(nil) keeps the W3C default: a publish through the Sender
// still carries traceparent. Before, it panicked at the first publish.
func TestNilPropagatorKeepsTheDefault(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	tel, err := bqotel.New(bqotel.WithTracerProvider(tp), bqotel.WithPropagator(nil))
	if err != nil {
		t.Fatal(err)
	}
	b := memqueue.New()
	pub := queue.NewPublisher(tel.Sender(b.Sender()), tel.PublisherOptions()...)
	if _, err := pub.Publish(context.Background(), "orders", urn, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := b.Receiver("orders").Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v, %d", err, len(ds))
	}
	if ds[0].Headers["traceparent"] == "" {
		t.Errorf("headers %v carry no traceparent", ds[0].Headers)
	}
}
