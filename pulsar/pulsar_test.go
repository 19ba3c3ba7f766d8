package pulsar

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

const testURN = "urn:babel:pulsar:test"

func receiveOne(t *testing.T, r *Receiver) *driver.Delivery {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ds, err := r.Receive(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			_ = r.Ack(context.Background(), ds[0])
			return ds[0]
		}
	}
	t.Fatal("nothing received")
	return nil
}

// With the native DLQ policy the client moves the message, unchanged, to the
// dead-letter topic once it was delivered max-attempts times.
func TestNativeDeadLetterPolicy(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	env, err := queue.NewPublisher(snd).Publish(context.Background(), topic, testURN, map[string]any{"k": 1})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := NewReceiver(client, topic+".dlq", "dlq-reader")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close(context.Background())
	r, err := NewReceiver(client, topic, "native-dlq", WithNativeDeadLetter(3, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var mu sync.Mutex
	var attempts []int
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		attempts = append(attempts, m.Envelope.Attempts)
		mu.Unlock()
		return errors.New("always")
	}, queue.WithMaxAttempts(3), queue.WithNativeDeadLetter())
	d := receiveOne(t, dead)
	_ = stop()
	got, err := core.Decode(d.Body)
	if err != nil || got.Meta.ID != env.Meta.ID || got.DeadLetter != nil {
		t.Fatalf("native dead letter %s (%v): want the original, unchanged", d.Body, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 3 || attempts[2] != 2 {
		t.Errorf("attempts seen %v, want [0 1 2] from RedeliveryCount", attempts)
	}
}

// The nack backoff decides when a native retry comes back.
func TestTopicPrefix(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	opt := WithTopicPrefix("persistent://public/default/")
	snd := NewSender(client, opt)
	defer snd.Close(context.Background())
	if _, err := queue.NewPublisher(snd).Publish(context.Background(), topic, testURN, nil); err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(client, topic, "prefix", opt)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	d := receiveOne(t, r)
	if d.Queue != topic || !strings.HasPrefix(d.Token.(*token).msg.Topic(), "persistent://public/default/"+topic) {
		t.Errorf("queue %q, topic %q", d.Queue, d.Token.(*token).msg.Topic())
	}
}

// A batch with one message over the broker's size limit fails that one alone.
func TestSendReportsPerMessageErrors(t *testing.T) {
	client := newClient(t)
	topic := newTopic(t)
	snd := NewSender(client)
	defer snd.Close(context.Background())
	msg := func(size int) *driver.Message {
		env, _ := core.New(testURN, map[string]any{"pad": strings.Repeat("x", size)}, core.WithQueue(topic))
		body, _ := env.Encode()
		return &driver.Message{Envelope: env, Body: body, Queue: topic}
	}
	err := snd.Send(context.Background(), []*driver.Message{msg(10), msg(6 << 20), msg(10)})
	var be *driver.BatchError
	if !errors.As(err, &be) || be.Failed(0) != nil || be.Failed(1) == nil || be.Failed(2) != nil {
		t.Fatalf("err = %v, want only message 1 failing", err)
	}
}

// TestProducersAreBounded publishes to more topics than WithMaxProducers
// allows, from concurrent callers, through batching producers that hold
// each message for a while: every message is persisted (no producer is
// closed with messages in flight), and afterwards the Sender keeps no more
// producers than the bound.
func TestProducersAreBounded(t *testing.T) {
	client := newClient(t)
	snd := NewSender(client, WithMaxProducers(2), WithProducerOptions(func(o *pulsar.ProducerOptions) {
		o.DisableBatching = false
		o.BatchingMaxPublishDelay = 20 * time.Millisecond
	}))
	defer snd.Close(context.Background())
	topics := make([]string, 6)
	for i := range topics {
		topics[i] = newTopic(t)
	}
	const perCaller = 20
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []error
		acked  int
	)
	for c := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perCaller {
				topic := topics[(c+i)%len(topics)]
				env, _ := core.New(testURN, map[string]any{"i": i}, core.WithQueue(topic))
				body, _ := env.Encode()
				m := &driver.Message{Envelope: env, Body: body, Queue: topic}
				if i%2 == 0 {
					err := snd.Send(context.Background(), []*driver.Message{m})
					mu.Lock()
					if err != nil {
						failed = append(failed, err)
					} else {
						acked++
					}
					mu.Unlock()
					continue
				}
				snd.SendAsync(context.Background(), []*driver.Message{m}, func(_ int, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = append(failed, err)
					} else {
						acked++
					}
				})
			}
		}()
	}
	wg.Wait()
	if err := snd.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n, errs := acked+len(failed), slices.Clone(failed)
		mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("%d messages failed, first: %v", len(errs), errs[0])
		}
		if n == 12*perCaller {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages acknowledged after 30 s", n, 12*perCaller)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := snd.producers.Len(); n > 2 {
		t.Fatalf("the Sender keeps %d producers, want at most 2", n)
	}
}
