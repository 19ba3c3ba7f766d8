package pulsar

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
