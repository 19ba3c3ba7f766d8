package queue_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

// Every envelope of a batch is checked before anything is sent: one invalid
// or missing envelope fails the batch, unsent, and names its index; a
// missing envelope is an error, not a panic, for PublishEnvelope too.
func TestPublishBatchValidatesFirst(t *testing.T) {
	for name, bad := range map[string]*core.Envelope{
		"invalid": {URN: " "},
		"nil":     nil,
	} {
		t.Run(name, func(t *testing.T) {
			b := memqueue.New()
			p := queue.NewPublisher(b.Sender())
			batch := make([]queue.Outgoing, 500)
			for i := range batch {
				env, err := core.New(urn, map[string]int{"n": i}, core.WithQueue("q"))
				if err != nil {
					t.Fatal(err)
				}
				batch[i] = queue.Outgoing{Envelope: env}
			}
			batch[400].Envelope = bad
			err := p.PublishBatch(context.Background(), batch)
			if err == nil || !strings.Contains(err.Error(), "batch message 400") {
				t.Fatalf("PublishBatch = %v, want the error of message 400", err)
			}
			if n := b.Len("q"); n != 0 {
				t.Fatalf("%d messages sent before failing", n)
			}
			if err := p.PublishEnvelope(context.Background(), bad); err == nil {
				t.Fatal("PublishEnvelope of a bad envelope succeeded")
			}
			if name == "nil" {
				if err := p.Redrive(context.Background(), nil); err == nil {
					t.Fatal("Redrive of no envelope succeeded")
				}
			}
		})
	}
}

// captureSender keeps the messages it is sent.
type captureSender struct{ msgs []*driver.Message }

func (s *captureSender) Send(_ context.Context, msgs []*driver.Message) error {
	s.msgs = append(s.msgs, msgs...)
	return nil
}

// TestPublishSendsTheEnvelopeItReturns: the body Publish hands the driver is
// the encoding of the envelope it returns, fresh ids included, and the
// caller may reuse its raw data at once.
func TestPublishSendsTheEnvelopeItReturns(t *testing.T) {
	snd := &captureSender{}
	p := queue.NewPublisher(snd)
	raw := []byte(`{"order_id":1042}`)
	env, err := p.Publish(context.Background(), "orders", "urn:babel:orders:created", raw, queue.WithKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	copy(raw, `{"order_id":9999}`)
	if len(snd.msgs) != 1 || snd.msgs[0].Envelope != env || snd.msgs[0].Queue != "orders" || string(snd.msgs[0].Key) != "k" {
		t.Fatalf("sent %+v", snd.msgs)
	}
	body := snd.msgs[0].Body
	if again, err := env.Encode(); err != nil || !bytes.Equal(again, body) {
		t.Errorf("sent body\n %s\nthe returned envelope encodes to\n %s (%v)", body, again, err)
	}
	got, err := core.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.ID != env.Meta.ID || got.TraceID != env.TraceID || string(got.Data()) != `{"order_id":1042}` ||
		got.Meta.Queue != "orders" || len(env.Meta.ID) != 36 || env.Meta.ID == env.TraceID {
		t.Errorf("sent %+v data %s, returned %+v", got, got.Data(), env)
	}
}
