package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue/transports/azureservicebus"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/kafka"
	bqpulsar "github.com/babelqueue/transports/pulsar"
	"github.com/babelqueue/transports/sqs"
)

// target is a parsed queue URL.
type target struct {
	scheme string
	host   string // host[:port], comma-separated for Kafka seeds
	queue  string
	query  url.Values
	raw    string
}

// errUsage marks bad input: a malformed URL, an unknown scheme, a bad flag.
var errUsage = errors.New("usage")

// usageError is bad input, reported in one line with exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return errUsage }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

var schemes = []string{"kafka", "sqs", "pulsar", "sb"}

// parseTarget parses kafka://h1:9092[,h2:9092]/topic, sqs://host[:port]/queue,
// pulsar://host:port/[tenant/namespace/]topic and sb://host[:port]/queue.
func parseTarget(raw string) (target, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" {
		return target{}, usagef("%q is not a queue URL: want scheme://host/queue, scheme one of %s", raw, strings.Join(schemes, ", "))
	}
	scheme = strings.ToLower(scheme)
	known := false
	for _, s := range schemes {
		known = known || s == scheme
	}
	if !known {
		return target{}, usagef("unknown scheme %q in %q: want one of %s", scheme, raw, strings.Join(schemes, ", "))
	}
	// Kafka seeds are comma-separated host:port pairs, which net/url does
	// not accept as one host: split the authority off by hand.
	authority, pathq, _ := strings.Cut(rest, "/")
	p, err := url.Parse("x://h/" + pathq)
	if err != nil {
		return target{}, usagef("malformed URL %q: %v", raw, err)
	}
	if authority == "" {
		return target{}, usagef("malformed URL %q: no host", raw)
	}
	for _, h := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil && scheme != "sqs" && scheme != "sb" {
			return target{}, usagef("malformed URL %q: %q is not host:port", raw, h)
		}
		if err == nil && (host == "" || strings.Trim(port, "0123456789") != "") {
			return target{}, usagef("malformed URL %q: %q is not host:port", raw, h)
		}
	}
	q := strings.Trim(p.Path, "/")
	if q == "" {
		return target{}, usagef("malformed URL %q: no queue or topic after the host", raw)
	}
	return target{scheme: scheme, host: authority, queue: q, query: p.Query(), raw: raw}, nil
}

// endpoint is a dead-letter queue opened for the commands: a receiver on
// it, and a sender for the copies it sends back.
type endpoint struct {
	rcv   driver.Receiver
	snd   driver.Sender
	close func(ctx context.Context)
	// browse, where the broker can, reads the queue without locking or
	// counting a delivery (Service Bus peek): peek and count use it.
	browse func(ctx context.Context, yield func(*driver.Delivery) bool) error
}

func (t target) param(name, def string) string {
	if v := t.query.Get(name); v != "" {
		return v
	}
	return def
}

func loopback(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// open connects to t and checks that the queue exists, within timeout.
func open(ctx context.Context, t target, timeout time.Duration) (*endpoint, error) {
	var (
		ep  *endpoint
		err error
	)
	switch t.scheme {
	case "kafka":
		ep, err = openKafka(t)
	case "sqs":
		ep, err = openSQS(ctx, t)
	case "pulsar":
		ep, err = openPulsar(t, timeout)
	case "sb":
		ep, err = openServiceBus(t)
	}
	if err != nil {
		return nil, err
	}
	if p, ok := ep.rcv.(driver.Preparer); ok {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := p.Prepare(pctx, driver.Plan{})
		cancel()
		if err != nil {
			ep.close(context.Background())
			return nil, fmt.Errorf("%s: %w", t.raw, err)
		}
	}
	return ep, nil
}

func openKafka(t target) (*endpoint, error) {
	seeds := strings.Split(t.host, ",")
	rcv, err := kafka.NewReceiver(seeds, t.param("group", "bq-cli"), []string{t.queue},
		kafka.WithPollWait(300*time.Millisecond), kafka.WithOrdering(kafka.OrderByPartition))
	if err != nil {
		return nil, err
	}
	snd, err := kafka.NewSender(seeds)
	if err != nil {
		_ = rcv.Close(context.Background())
		return nil, err
	}
	return &endpoint{rcv: rcv, snd: snd, close: func(ctx context.Context) {
		_ = rcv.Close(ctx)
		_ = snd.Close(ctx)
	}}, nil
}

func openSQS(ctx context.Context, t target) (*endpoint, error) {
	opts := []func(*awsconfig.LoadOptions) error{}
	if r := t.query.Get("region"); r != "" {
		opts = append(opts, awsconfig.WithRegion(r))
	} else if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		opts = append(opts, awsconfig.WithRegion("us-east-1"))
	}
	local := loopback(t.host)
	if local && os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		// A local server takes any signature.
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	endpointURL := "https://" + t.host
	if local || t.query.Get("tls") == "0" {
		endpointURL = "http://" + t.host
	}
	api := awssqs.NewFromConfig(cfg, sqs.SafeRequestBodies, func(o *awssqs.Options) {
		o.BaseEndpoint = aws.String(endpointURL)
		o.RetryMaxAttempts = 2
	})
	rcv := sqs.NewReceiver(api, t.queue, sqs.WithWaitTime(time.Second))
	snd := sqs.NewSender(api)
	return &endpoint{rcv: rcv, snd: snd, close: func(ctx context.Context) {
		_ = rcv.Close(ctx)
		_ = snd.Close(ctx)
	}}, nil
}

func openPulsar(t target, timeout time.Duration) (*endpoint, error) {
	opts := pulsar.ClientOptions{URL: "pulsar://" + t.host, OperationTimeout: timeout, ConnectionTimeout: timeout,
		Logger: quietPulsarLogger()}
	if tok := os.Getenv("PULSAR_AUTH_TOKEN"); tok != "" {
		opts.Authentication = pulsar.NewAuthenticationToken(tok)
	}
	client, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, err
	}
	topic := t.queue
	if strings.Count(topic, "/") == 2 {
		topic = "persistent://" + topic
	}
	rcv, err := bqpulsar.NewReceiver(client, topic, t.param("subscription", "bq-cli"),
		bqpulsar.WithInitialPosition(pulsar.SubscriptionPositionEarliest))
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("%s: subscribing to %s at %s: %w", t.raw, topic, opts.URL, err)
	}
	snd := bqpulsar.NewSender(client)
	return &endpoint{rcv: rcv, snd: snd, close: func(ctx context.Context) {
		_ = rcv.Close(ctx)
		_ = snd.Close(ctx)
		client.Close()
	}}, nil
}

// serviceBusConnectionString is the connection string from the
// environment, with its endpoint set to the URL's host.
func serviceBusConnectionString(t target) (string, error) {
	cs := os.Getenv("AZURE_SERVICEBUS_CONNECTION_STRING")
	if cs == "" {
		cs = os.Getenv("BQ_ASB_CONNECTION_STRING")
	}
	if cs == "" {
		if !loopback(t.host) {
			return "", usagef("sb://%s: set AZURE_SERVICEBUS_CONNECTION_STRING to the namespace's connection string", t.host)
		}
		// The emulator and the test server take any key.
		cs = "SharedAccessKeyName=local;SharedAccessKey=local;UseDevelopmentEmulator=true"
	}
	var parts []string
	for _, kv := range strings.Split(cs, ";") {
		if kv != "" && !strings.HasPrefix(strings.ToLower(kv), "endpoint=") {
			parts = append(parts, kv)
		}
	}
	return "Endpoint=sb://" + t.host + ";" + strings.Join(parts, ";"), nil
}

func openServiceBus(t target) (*endpoint, error) {
	cs, err := serviceBusConnectionString(t)
	if err != nil {
		return nil, err
	}
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.raw, err)
	}
	var ropts []azureservicebus.ReceiverOption
	ropts = append(ropts, azureservicebus.WithPollWait(time.Second))
	if sub := t.query.Get("subscription"); sub != "" {
		ropts = append(ropts, azureservicebus.WithSubscription(t.queue, sub))
	}
	rcv, err := azureservicebus.NewReceiver(client, t.queue, ropts...)
	if err != nil {
		_ = client.Close(context.Background())
		return nil, fmt.Errorf("%s: %w", t.raw, err)
	}
	snd := azureservicebus.NewSender(client)
	ep := &endpoint{rcv: rcv, snd: snd, close: func(ctx context.Context) {
		_ = rcv.Close(ctx)
		_ = snd.Close(ctx)
		_ = client.Close(ctx)
	}}
	var native *azservicebus.Receiver
	if rcv.As(&native) {
		ep.browse = func(ctx context.Context, yield func(*driver.Delivery) bool) error {
			return browseServiceBus(ctx, native, t.queue, yield)
		}
	}
	return ep, nil
}

// browseServiceBus peeks at every message of the entity in sequence order:
// a receive would lock each one, and a lock handed back counts as a
// delivery (and a closed link keeps its locks until they expire).
func browseServiceBus(ctx context.Context, r *azservicebus.Receiver, q string, yield func(*driver.Delivery) bool) error {
	// Explicit sequence numbers: the receiver's own peek cursor has moved
	// past the message the startup check peeked at.
	from := int64(0)
	for {
		msgs, err := r.PeekMessages(ctx, 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			return fmt.Errorf("peeking at %s: %w", q, err)
		}
		if len(msgs) == 0 {
			return nil
		}
		for _, m := range msgs {
			h := make(map[string]string, len(m.ApplicationProperties))
			for k, v := range m.ApplicationProperties {
				h[k] = fmt.Sprint(v)
			}
			if !yield(&driver.Delivery{Body: m.Body, Queue: q, Headers: h, Position: m.MessageID}) {
				return nil
			}
		}
		last := msgs[len(msgs)-1].SequenceNumber
		if last == nil {
			return nil
		}
		from = *last + 1
	}
}
