// Command otelprometheus runs a Kafka consumer instrumented with the
// BabelQueue OpenTelemetry module and serves its metrics through
// OpenTelemetry's Prometheus exporter, beside the consumer's health probes.
// It starts an embedded kfake cluster, so it needs only Go:
//
//	go run ./otelprometheus              # serve on 127.0.0.1:9464 until Ctrl-C
//	go run ./otelprometheus -once        # publish, handle, print one scrape, exit
//
// Then: curl 127.0.0.1:9464/metrics, curl 127.0.0.1:9464/readyz.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kfake"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/babelqueue/transports/core/queue"
	"github.com/babelqueue/transports/kafka"
	bqotel "github.com/babelqueue/transports/otel"
)

const (
	topic    = "orders"
	urnOrder = "urn:babel:orders:created"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "where to serve /metrics, /readyz and /livez")
	once := flag.Bool("once", false, "publish and handle a few messages, print one scrape and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *once, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otelprometheus:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, once bool, out io.Writer) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()

	// The Prometheus exporter is a metric reader on its own registry.
	reg := prometheus.NewRegistry()
	exporter, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider() // add an exporter (OTLP…) to ship spans
	defer tp.Shutdown(context.Background())
	tel, err := bqotel.New(bqotel.WithMeterProvider(mp), bqotel.WithTracerProvider(tp), bqotel.WithSystem(bqotel.SystemKafka))
	if err != nil {
		return err
	}

	ksnd, err := kafka.NewSender(seeds)
	if err != nil {
		return err
	}
	defer ksnd.Close(context.Background())
	rcv, err := kafka.NewReceiver(seeds, "orders-service", []string{topic}, kafka.WithPollWait(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer rcv.Close(context.Background())

	snd := tel.Sender(ksnd)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := queue.NewConsumer(rcv, snd, append(tel.ConsumerOptions(),
		queue.WithDeadLetter(""), queue.WithMaxAttempts(2), queue.WithBackoff(queue.Constant(10*time.Millisecond)),
		queue.WithLogger(quiet))...)
	handled := make(chan struct{}, 16)
	c.Handle(urnOrder, func(_ context.Context, m *queue.Message) error {
		defer func() { handled <- struct{}{} }()
		if strings.Contains(string(m.Envelope.Data()), `"fail"`) {
			return errors.New("card declined")
		}
		return nil
	})
	lagReg, err := tel.ObserveConsumer(c)
	if err != nil {
		return err
	}
	defer lagReg.Unregister()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	health := queue.HealthHandler(c)
	mux.Handle("/readyz", health)
	mux.Handle("/livez", health)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()

	pub := queue.NewPublisher(snd, tel.PublisherOptions()...)
	for i := range 5 {
		data := map[string]any{"order": i}
		if i == 4 {
			data["fail"] = true
		}
		if _, err := pub.Publish(ctx, topic, urnOrder, data); err != nil {
			return err
		}
	}
	if !once {
		fmt.Fprintf(out, "serving http://%s/metrics, /readyz and /livez; Ctrl-C to stop\n", ln.Addr())
		<-ctx.Done()
		cancel()
		return <-done
	}
	for range 6 { // 4 acked, 1 retried, then dead-lettered
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			return errors.New("timed out waiting for the handlers")
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if (strings.HasPrefix(line, "messaging_") || strings.HasPrefix(line, "babelqueue_")) && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}
