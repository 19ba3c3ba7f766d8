package bqotel_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
	bqotel "github.com/babelqueue/transports/otel"
)

// Wrap the broker module's sender once, build the Publisher and the
// Consumer on it, and install the consumer options: every message gets a
// producer span and a consumer span in one trace, and the runtime's metrics
// go to the meter provider.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tel, err := bqotel.New(bqotel.WithTracerProvider(tp), bqotel.WithMeterProvider(mp), bqotel.WithSystem(bqotel.SystemKafka))
	if err != nil {
		panic(err)
	}

	broker := memqueue.New() // kafka.NewSender(…) and kafka.NewReceiver(…) in a service
	snd := tel.Sender(broker.Sender())
	pub := queue.NewPublisher(snd, tel.PublisherOptions()...)
	if _, err := pub.Publish(context.Background(), "orders", "urn:babel:orders:created", map[string]any{"id": 7}); err != nil {
		panic(err)
	}

	c := queue.NewConsumer(broker.Receiver("orders"), snd, tel.ConsumerOptions()...)
	c.Handle("urn:babel:orders:created", func(context.Context, *queue.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	for len(spans.Ended()) < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	for _, s := range spans.Ended() {
		fmt.Println(s.Name(), s.SpanKind(), s.SpanContext().TraceID() == spans.Ended()[0].SpanContext().TraceID())
	}
	// Output:
	// send orders producer true
	// process orders consumer true
}
