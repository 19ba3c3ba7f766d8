package bqotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/queue"
)

// durationBuckets are the semantic conventions' advice for durations in
// seconds.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

func (t *Telemetry) instruments() error {
	var err error
	m := t.meter
	if t.sent, err = m.Int64Counter("messaging.client.sent.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages a Publisher sent (retry and dead-letter copies are not counted).")); err != nil {
		return err
	}
	if t.consumed, err = m.Int64Counter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages handled, by babelqueue.outcome.")); err != nil {
		return err
	}
	if t.duration, err = m.Float64Histogram("messaging.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of handling a message to its settlement."),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return err
	}
	if t.retries, err = m.Int64Counter("babelqueue.retries", metric.WithUnit("{message}"),
		metric.WithDescription("Failed messages retried.")); err != nil {
		return err
	}
	if t.dead, err = m.Int64Counter("babelqueue.dead_letters", metric.WithUnit("{message}"),
		metric.WithDescription("Messages dead-lettered, by babelqueue.dead_letter.reason.")); err != nil {
		return err
	}
	if t.settleErr, err = m.Int64Counter("babelqueue.settle.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed acknowledgements, releases and copy publishes, by babelqueue.settle.operation.")); err != nil {
		return err
	}
	if t.inflight, err = m.Int64UpDownCounter("babelqueue.process.in_flight", metric.WithUnit("{message}"),
		metric.WithDescription("Handlers running.")); err != nil {
		return err
	}
	if t.lag, err = m.Int64ObservableGauge("babelqueue.consumer.lag", metric.WithUnit("{message}"),
		metric.WithDescription("Messages not yet committed by the consumer, where the broker module knows it.")); err != nil {
		return err
	}
	return nil
}

func metricAttrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// Metrics returns the queue.Metrics that records through the meter. Pass it
// to queue.WithMetrics and queue.WithPublisherMetrics (ConsumerOptions and
// PublisherOptions do).
func (t *Telemetry) Metrics() queue.Metrics { return metrics{t} }

type metrics struct{ t *Telemetry }

func (m metrics) Published(q, urn string, n int) {
	m.t.sent.Add(context.Background(), int64(n), metricAttrs(m.t.system, semconv.MessagingDestinationName(q),
		semconv.MessagingOperationName("send"), AttrURN.String(urn)))
}

func (m metrics) Handled(q, urn string, outcome queue.Outcome, latency time.Duration) {
	attrs := metricAttrs(m.t.system, semconv.MessagingDestinationName(q),
		semconv.MessagingOperationName("process"), AttrURN.String(urn), AttrOutcome.String(string(outcome)))
	ctx := context.Background()
	m.t.consumed.Add(ctx, 1, attrs)
	m.t.duration.Record(ctx, latency.Seconds(), attrs)
}

func (m metrics) Retried(q, urn string, _ int) {
	m.t.retries.Add(context.Background(), 1, metricAttrs(m.t.system, semconv.MessagingDestinationName(q), AttrURN.String(urn)))
}

func (m metrics) DeadLettered(q, urn string, reason core.Reason) {
	m.t.dead.Add(context.Background(), 1, metricAttrs(m.t.system, semconv.MessagingDestinationName(q),
		AttrURN.String(urn), AttrReason.String(string(reason))))
}

func (m metrics) SettleFailed(q, op string) {
	m.t.settleErr.Add(context.Background(), 1, metricAttrs(m.t.system, semconv.MessagingDestinationName(q), AttrSettleOp.String(op)))
}

// Lagger is what ObserveConsumer reads: a *queue.Consumer.
type Lagger interface {
	// Lag returns the messages not yet committed per consumed queue, nil
	// when the broker module does not know it.
	Lag() map[string]int64
}

// ObserveConsumer reports c's lag as the babelqueue.consumer.lag gauge on
// every collection, per consumed queue, where the broker module knows it
// (Kafka). Unregister the returned registration when c is done.
func (t *Telemetry) ObserveConsumer(c Lagger) (metric.Registration, error) {
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for q, n := range c.Lag() {
			o.ObserveInt64(t.lag, n, metricAttrs(t.system, semconv.MessagingDestinationName(q)))
		}
		return nil
	}, t.lag)
}
