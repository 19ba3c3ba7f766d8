package pulsar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

// attemptTimes runs a consumer whose handler fails the first fails runs of
// one message, and returns when each run started.
func attemptTimes(t *testing.T, r *Receiver, snd *Sender, fails int, opts ...queue.ConsumerOption) []time.Time {
	t.Helper()
	var mu sync.Mutex
	var at []time.Time
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) <= fails {
			return errors.New("not yet")
		}
		return nil
	}, append([]queue.ConsumerOption{queue.WithMaxAttempts(fails + 2)}, opts...)...)
	drivertest.WaitUntil(t, 30*time.Second, "every attempt", func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == fails+1 })
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Time(nil), at...)
}

func checkGaps(t *testing.T, at []time.Time, backoff time.Duration) {
	t.Helper()
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < backoff*8/10 {
			t.Errorf("attempt %d came %v after the previous one; the backoff asked for %v", i+1, gap, backoff)
		}
	}
}

// The default retry republishes with DeliverAfter and bq-delay; a delay at
// or below the broker's 1s delayed-delivery tick, which the broker delivers
// at once, is held by the Receiver until due.
func TestSubTickBackoffIsHonoured(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), topic, testURN, nil); err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(client, topic, "subtick")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	const backoff = 500 * time.Millisecond
	checkGaps(t, attemptTimes(t, r, snd, 2, queue.WithBackoff(queue.Constant(backoff))), backoff)
}

// Native retry negatively acknowledges after the consumer's backoff (no
// NackBackoffPolicy needed); before, it waited the client's default minute.
func TestNativeRetryHonoursTheBackoff(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), topic, testURN, nil); err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(client, topic, "native", WithNativeRetry())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	const backoff = 700 * time.Millisecond
	at := attemptTimes(t, r, snd, 1, queue.WithBackoff(queue.Constant(backoff)))
	checkGaps(t, at, backoff)
	if gap := at[1].Sub(at[0]); gap > 10*time.Second {
		t.Errorf("native retry after %v: the client's default nack delay, not the backoff", gap)
	}
}

// A delayed publish carries bq-delay in milliseconds, as the sibling
// transports write it.
func TestDelayedPublishCarriesBqDelay(t *testing.T) {
	env, _ := core.New(testURN, nil)
	body, _ := env.Encode()
	pm := ProducerMessage(&driver.Message{Envelope: env, Body: body, Queue: "q", Delay: 1500 * time.Millisecond})
	if pm.Properties[PropDelay] != "1500" || pm.DeliverAfter != 1500*time.Millisecond {
		t.Errorf("bq-delay %q, DeliverAfter %v", pm.Properties[PropDelay], pm.DeliverAfter)
	}
	pm = ProducerMessage(&driver.Message{Envelope: env, Body: body, Queue: "q"})
	if _, ok := pm.Properties[PropDelay]; ok {
		t.Error("an undelayed message carries bq-delay")
	}
}

// With producer batching on, retries are exact per message: of 100
// messages, every fourth failing once, each success is handled once.
// Before, a nack redelivered its whole batch and successes ran 2–4 times.
func TestRetriesAreExactPerMessageWithBatching(t *testing.T) {
	for _, native := range []bool{false, true} {
		client := newClient(t)
		topic := newTopic(t)
		snd := NewSender(client, WithProducerOptions(func(o *pulsar.ProducerOptions) {
			o.DisableBatching = false // batches of many messages: acks and nacks must stay exact
			o.BatchingMaxPublishDelay = 20 * time.Millisecond
		}))
		var batch []queue.Outgoing
		for i := range 100 {
			env, _ := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
			batch = append(batch, queue.Outgoing{Envelope: env})
		}
		if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		var opts []ReceiverOption
		if native {
			opts = append(opts, WithNativeRetry())
		}
		r, err := NewReceiver(client, topic, "exact", opts...)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs := map[int]int{}
		ok := map[int]int{}
		stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
			var d struct{ I int }
			_ = m.Envelope.DecodeData(&d)
			mu.Lock()
			defer mu.Unlock()
			runs[d.I]++
			if d.I%4 == 0 && m.Envelope.Attempts == 0 {
				return errors.New("once")
			}
			ok[d.I]++
			return nil
		}, queue.WithConcurrency(4), queue.WithBackoff(queue.Constant(50*time.Millisecond)))
		drivertest.WaitUntil(t, 30*time.Second, "100 successes", func() bool { mu.Lock(); defer mu.Unlock(); return len(ok) == 100 })
		time.Sleep(500 * time.Millisecond)
		_ = stop()
		_ = r.Close(context.Background())
		_ = snd.Close(context.Background())
		mu.Lock()
		for i, n := range ok {
			if n != 1 {
				t.Errorf("native=%v: message %d succeeded %d times", native, i, n)
			}
		}
		mu.Unlock()
	}
}

// Publish honours its context while the broker cannot be reached (the
// client's operation timeout is 30s), and a topic whose producer is stuck
// does not block publishes to another topic.
func TestPublishHonoursContext(t *testing.T) {
	needBroker(t)
	port, err := drivertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down, err := pulsar.NewClient(pulsar.ClientOptions{URL: fmt.Sprintf("pulsar://127.0.0.1:%d", port), OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	snd := NewSender(down)
	defer snd.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if _, err := queue.NewPublisher(snd).Publish(ctx, "t", testURN, nil); err == nil {
		t.Fatal("publish with the broker down succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Publish returned after %v; its context allowed 1s", d)
	}

	// One Sender, one topic stuck (its producer cannot be created in time),
	// another fine.
	client := newClient(t)
	mixed := NewSender(client, WithTopicPrefix(""))
	defer mixed.Close(context.Background())
	topic := newTopic(t)
	slowCtx, cancelSlow := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelSlow()
	go func() {
		_, _ = queue.NewPublisher(mixed).Publish(slowCtx, "persistent://no-such-tenant/ns/x", testURN, nil)
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := queue.NewPublisher(mixed).Publish(ctx2, topic, testURN, nil); err != nil {
		t.Fatalf("publish to a good topic: %v", err)
	}
}

// TestFaults runs the shared fault suite on the real broker.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite is long")
	}
	client := newClient(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	h := drivertest.FaultHarness{
		KillBroker:  serverScript("kill"),
		StartBroker: serverScript("resume"),
		Harness: drivertest.Harness{
			NewQueue: func(t *testing.T) string { return newTopic(t) },
			Sender:   func(*testing.T) driver.Sender { return snd },
			Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
				r, err := NewReceiver(client, q, "sub-"+q)
				if err != nil {
					t.Fatal(err)
				}
				return r, func() { _ = r.Close(context.Background()) }
			},
			Timeout: 90 * time.Second,
		},
		Module: "pulsar",
		Server: "pulsar-4.2.4",
	}
	if os.Getenv(EnvServerScript) == "" {
		h.KillBroker, h.StartBroker = nil, nil
	}
	drivertest.RunFaults(t, h)
}

// EnvServerScript names the scripts/pulsar-server.sh that started the
// broker; with it the fault suite kills the broker mid-consume and resumes
// it on its data.
const EnvServerScript = "BQ_PULSAR_SERVER_SCRIPT"

func serverScript(verb string) func(t *testing.T) {
	return func(t *testing.T) {
		out, err := exec.Command(os.Getenv(EnvServerScript), verb).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", os.Getenv(EnvServerScript), verb, err, out)
		}
	}
}

// As reaches the native types: the client of a Sender, the consumer of a
// Receiver and a delivery's pulsar.Message.
func TestAs(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	var c pulsar.Client
	if !snd.As(&c) || c != client {
		t.Error("Sender.As(*pulsar.Client) failed")
	}
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), topic, testURN, nil); err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(client, topic, "as")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var consumer pulsar.Consumer
	if !r.As(&consumer) || consumer == nil {
		t.Error("Receiver.As(*pulsar.Consumer) failed")
	}
	ds, err := r.Receive(context.Background(), 1)
	for len(ds) == 0 && err == nil {
		ds, err = r.Receive(context.Background(), 1)
	}
	if err != nil {
		t.Fatal(err)
	}
	var msg pulsar.Message
	if !ds[0].As(&msg) || msg.ID().String() != ds[0].Position {
		t.Errorf("Delivery.As(*pulsar.Message) = %v", msg)
	}
	var wrong *int
	if ds[0].As(&wrong) || r.As(&wrong) {
		t.Error("As took a wrong type")
	}
}

// An empty payload in a producer batch reaches the runtime (batch-index
// acknowledgement on) and is quarantined as poison, with the batch's other
// messages; nothing vanishes silently.
func TestEmptyPayloadInABatchIsQuarantined(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	raw, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxPublishDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, p := range [][]byte{[]byte("first of the batch"), {}, []byte("last of the batch")} {
		raw.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: p}, func(pulsar.MessageID, *pulsar.ProducerMessage, error) {})
	}
	if err := raw.FlushWithCtx(context.Background()); err != nil {
		t.Fatal(err)
	}
	snd := NewSender(client)
	defer snd.Close(context.Background())
	r, err := NewReceiver(client, topic, "poison")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error { return nil }, queue.WithDeadLetter(""))
	dlq, err := NewReceiver(client, topic+".dlq", "dlq")
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(context.Background())
	var bodies []string
	drivertest.WaitUntil(t, 20*time.Second, "three quarantined messages", func() bool {
		ds, _ := dlq.Receive(context.Background(), 3)
		for _, d := range ds {
			if d.Headers[PropDeadLetterReason] != "poison" {
				t.Errorf("dead letter %q has reason %q", d.Body, d.Headers[PropDeadLetterReason])
			}
			bodies = append(bodies, string(d.Body))
			_ = dlq.Ack(context.Background(), d)
		}
		return len(bodies) >= 3
	})
	_ = stop()
	if !slices.Contains(bodies, "") {
		t.Errorf("quarantined %q: the empty message is missing", bodies)
	}
}

// WatchDiscards reports every message the client says it discarded, with
// its fields, and passes the log line on.
func TestWatchDiscards(t *testing.T) {
	var got []DiscardedMessage
	var logged []string
	next := plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(writerFunc(func(p []byte) { logged = append(logged, string(p)) }), nil)))
	l := WatchDiscards(next, func(d DiscardedMessage) { got = append(got, d) })
	l.WithFields(plog.Fields{"msgID": "1:2:0", "validationError": "BatchDeSerializeError"}).Error("Discarding corrupted message")
	l.SubLogger(plog.Fields{"topic": "t"}).WithField("msgID", "3:4:0").Error("Discarding corrupted message")
	l.WithError(errors.New("x")).Error("some other error")
	if len(got) != 2 || got[0].Fields["validationError"] != "BatchDeSerializeError" || got[1].Fields["msgID"] != "3:4:0" {
		t.Fatalf("reported %+v", got)
	}
	if !strings.Contains(got[0].Error(), "1:2:0") || len(logged) != 3 {
		t.Errorf("error %q, %d lines logged, want 3", got[0].Error(), len(logged))
	}
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// On a Failover subscription the broker delivers a DeliverAfter message at
// once, and the Receiver holds it in memory until its bq-delay is due.
// WithMaxHeld bounds what it holds: past it, Receive takes nothing more
// from the consumer until a held message is due. Every message still
// arrives, and none before its delay.
func TestHeldMessagesAreBounded(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	const n, maxHeld, delay = 120, 10, 1500 * time.Millisecond
	r, err := NewReceiver(client, topic, "held", WithSubscriptionType(pulsar.Failover), WithMaxHeld(maxHeld))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	drivertest.PublishN(t, snd, topic, testURN, n, queue.WithDelay(delay))
	seen := map[string]bool{}
	most := int64(0)
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		ds, err := r.Receive(context.Background(), 50)
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, r.held.Load())
		for _, d := range ds {
			var msg pulsar.Message
			if !d.As(&msg) {
				t.Fatal("a delivery's As gives no pulsar.Message")
			}
			if due, _ := dueAt(msg); time.Now().Before(due) {
				t.Errorf("message %s delivered %v before its delay was due", d.Position, time.Until(due))
			}
			env, err := core.Decode(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			seen[env.Meta.ID] = true
			if err := r.Ack(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d messages delivered", len(seen), n)
	}
	if most > maxHeld {
		t.Errorf("the Receiver held up to %d messages for their delay; WithMaxHeld(%d)", most, maxHeld)
	}
	if most == 0 {
		t.Error("no message was held: the subscription delivered them late, and the test shows nothing")
	}
}

// With WithNativeRetry a Release waits out its delay before the nack, the
// message held meanwhile; WithMaxHeld bounds those too: past it, Receive
// takes nothing more until a nack has gone out. Every message still comes
// back, and is acknowledged in the end.
func TestDelayedNacksAreBounded(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	const n, maxHeld = 20, 5
	r, err := NewReceiver(client, topic, "nacks", WithNativeRetry(), WithMaxHeld(maxHeld))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	drivertest.PublishN(t, snd, topic, testURN, n)
	drivertest.ReleasesAreBounded(t, r, n, maxHeld, 2*time.Second)
}
