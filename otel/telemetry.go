package bqotel

import (
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue/transports/core/queue"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/babelqueue/transports/otel"

// The messaging.system values of the four broker modules.
const (
	SystemKafka      = "kafka"
	SystemSQS        = "aws_sqs"
	SystemPulsar     = "pulsar"
	SystemServiceBus = "servicebus"
)

// Attribute keys of this package (the others are the semantic conventions').
const (
	// AttrURN is the envelope's job URN.
	AttrURN = attribute.Key("babelqueue.urn")
	// AttrAttempts is the envelope's attempts: how many times the message
	// was tried before (its retry count).
	AttrAttempts = attribute.Key("babelqueue.message.attempts")
	// AttrHop says what a producer span sent: "publish" (a new message),
	// "retry" or "dead_letter" (a copy the consumer made).
	AttrHop = attribute.Key("babelqueue.hop")
	// AttrReplay is true on a replayed message (queue.IsReplay).
	AttrReplay = attribute.Key("babelqueue.replay")
	// AttrOutcome is how a handled message was settled (queue.Outcome).
	AttrOutcome = attribute.Key("babelqueue.outcome")
	// AttrReason is a dead-letter reason.
	AttrReason = attribute.Key("babelqueue.dead_letter.reason")
	// AttrSettleOp names a failed settlement (ack, release, retry-publish…).
	AttrSettleOp = attribute.Key("babelqueue.settle.operation")
)

// Hop values of AttrHop.
const (
	HopPublish    = "publish"
	HopRetry      = "retry"
	HopDeadLetter = "dead_letter"
)

// Telemetry holds the tracer, meter instruments and propagator shared by a
// service's senders, middleware and metrics. It is safe for concurrent use.
type Telemetry struct {
	tracer trace.Tracer
	meter  metric.Meter
	prop   propagation.TextMapPropagator
	system attribute.KeyValue

	sent      metric.Int64Counter
	consumed  metric.Int64Counter
	duration  metric.Float64Histogram
	retries   metric.Int64Counter
	dead      metric.Int64Counter
	settleErr metric.Int64Counter
	inflight  metric.Int64UpDownCounter
	lag       metric.Int64ObservableGauge
}

type config struct {
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	prop   propagation.TextMapPropagator
	system string
}

// Option configures a Telemetry.
type Option func(*config)

// WithTracerProvider sets the tracer provider (default: the global one,
// otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider (default: the global one,
// otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagator sets how span contexts ride in message headers (default:
// W3C trace context, traceparent and tracestate). Pass
// otel.GetTextMapPropagator() to use the global one, baggage included.
// A nil p keeps the default.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.prop = p
		}
	}
}

// WithSystem sets messaging.system: SystemKafka, SystemSQS, SystemPulsar,
// SystemServiceBus (default "babelqueue" when the broker is not named).
func WithSystem(system string) Option { return func(c *config) { c.system = system } }

// New returns a Telemetry, creating its instruments on the meter provider.
func New(opts ...Option) (*Telemetry, error) {
	cfg := config{system: "babelqueue", prop: propagation.TraceContext{}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	t := &Telemetry{
		tracer: cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		meter:  cfg.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL)),
		prop:   cfg.prop,
		system: semconv.MessagingSystemKey.String(cfg.system),
	}
	if err := t.instruments(); err != nil {
		return nil, fmt.Errorf("babelqueue/otel: creating instruments: %w", err)
	}
	return t, nil
}

// ConsumerOptions installs the consumer middleware and the metrics:
// queue.NewConsumer(rcv, t.Sender(snd), t.ConsumerOptions()...).
func (t *Telemetry) ConsumerOptions() []queue.ConsumerOption {
	return []queue.ConsumerOption{queue.WithMiddleware(t.Middleware()), queue.WithMetrics(t.Metrics())}
}

// PublisherOptions installs the metrics on a Publisher; its spans come from
// the Sender it is built on: queue.NewPublisher(t.Sender(snd),
// t.PublisherOptions()...).
func (t *Telemetry) PublisherOptions() []queue.PublisherOption {
	return []queue.PublisherOption{queue.WithPublisherMetrics(t.Metrics())}
}
