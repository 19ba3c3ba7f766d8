package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
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

// TestPublishBatchBodies: every message of a batch carries its own
// envelope's encoding and options, whatever the envelopes' sizes (the
// batch's bodies share one buffer, grown past the first body's size here),
// and no body reaches into the next.
func TestPublishBatchBodies(t *testing.T) {
	snd := &captureSender{}
	p := queue.NewPublisher(snd, queue.WithDefaultHeaders(map[string]string{"app": "billing"}))
	sizes := []int{1, 10_000, 3, 0, 70_000, 5}
	batch := make([]queue.Outgoing, len(sizes))
	for i, n := range sizes {
		env, err := core.New(urn, map[string]string{"note": strings.Repeat("x", n)}, core.WithQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(fmt.Sprint("k", i))}}
	}
	batch[2].Options = append(batch[2].Options, queue.ToQueue("elsewhere"), queue.WithHeader("tenant", "t2"))
	if err := p.PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if len(snd.msgs) != len(batch) {
		t.Fatalf("sent %d messages, want %d", len(snd.msgs), len(batch))
	}
	for i, m := range snd.msgs {
		want, err := batch[i].Envelope.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Body, want) || cap(m.Body) != len(m.Body) {
			t.Errorf("message %d: body of %d bytes (cap %d), want the envelope's %d", i, len(m.Body), cap(m.Body), len(want))
		}
		if m.Envelope != batch[i].Envelope || m.Key != fmt.Sprint("k", i) || m.Headers["app"] != "billing" {
			t.Errorf("message %d: %+v", i, m)
		}
	}
	if m := snd.msgs[2]; m.Queue != "elsewhere" || m.Headers["tenant"] != "t2" {
		t.Errorf("message 2 went to %q with headers %v", m.Queue, m.Headers)
	}
	if m := snd.msgs[3]; m.Queue != "q" || m.Headers["tenant"] != "" {
		t.Errorf("message 3 went to %q with headers %v", m.Queue, m.Headers)
	}
	// A body appended to must not overwrite the next one.
	_ = append(snd.msgs[0].Body, "garbage"...)
	if want, _ := batch[1].Envelope.Encode(); !bytes.Equal(snd.msgs[1].Body, want) {
		t.Error("appending to one body changed the next")
	}
}

// TestPublishBatchLargeFirstBody: the room reserved for a batch's bodies
// from the size of its first one is bounded, so a large first message
// followed by many small ones costs about what the bodies take, not the
// first body's size once for every message.
func TestPublishBatchLargeFirstBody(t *testing.T) {
	snd := &captureSender{}
	p := queue.NewPublisher(snd)
	batch := make([]queue.Outgoing, 2000)
	for i := range batch {
		note := "x"
		if i == 0 {
			note = strings.Repeat("x", 1<<20)
		}
		env, err := core.New(urn, map[string]string{"note": note}, core.WithQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = queue.Outgoing{Envelope: env}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := p.PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Errorf("a batch of one 1 MiB body and 1999 small ones allocated %d MiB", n>>20)
	}
	if len(snd.msgs) != len(batch) || len(snd.msgs[0].Body) < 1<<20 || len(snd.msgs[1999].Body) > 1<<10 {
		t.Errorf("sent %d messages", len(snd.msgs))
	}
}

// unretainingSender copies what it is sent and keeps nothing of it, and
// says so unless retains is set.
type unretainingSender struct {
	retains bool
	bodies  [][]byte // copies, one per message, across every Send
	msgs    []*driver.Message
}

func (s *unretainingSender) Send(_ context.Context, msgs []*driver.Message) error {
	for _, m := range msgs {
		s.bodies = append(s.bodies, bytes.Clone(m.Body))
	}
	s.msgs = append(s.msgs, msgs...) // kept only to see the memory reused
	return nil
}

func (s *unretainingSender) RetainsNothing() bool { return !s.retains }

func envelopes(t *testing.T, n, size int) []queue.Outgoing {
	t.Helper()
	out := make([]queue.Outgoing, n)
	for i := range out {
		env, err := core.New(urn, map[string]string{"note": strings.Repeat("x", size+i)}, core.WithQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(fmt.Sprint("k", i))}}
	}
	return out
}

// TestPublishBatchReusesMemoryOnlyWhenTheSenderKeepsNothing: through a
// driver.Unretaining sender, a batch is built in the memory of the one
// before, and every Send still sees each envelope's own encoding; through
// a sender that may keep what it is sent, or a batch of one, the messages
// and bodies of an earlier Send stay as they were.
func TestPublishBatchReusesMemoryOnlyWhenTheSenderKeepsNothing(t *testing.T) {
	ctx := context.Background()
	t.Run("unretaining", func(t *testing.T) {
		snd := &unretainingSender{}
		p := queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
		var sent []queue.Outgoing
		reused := false
		for round, n := range []int{40, 40, 25, 60, 2} {
			batch := envelopes(t, n, 50*round)
			before := len(snd.msgs)
			if err := p.PublishBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			if round > 0 && before > 0 && snd.msgs[before] == snd.msgs[0] {
				reused = true
			}
			sent = append(sent, batch...)
		}
		for i, o := range sent {
			want, err := o.Envelope.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(snd.bodies[i], want) {
				t.Fatalf("message %d was sent as\n %s\nwant\n %s", i, snd.bodies[i], want)
			}
		}
		// sync.Pool may drop what it holds (the race detector makes it do
		// so at random), so reuse is asserted only without it.
		if !reused && !raceEnabled {
			t.Error("no batch was built in the memory of an earlier one")
		}
		// What is kept for the next batch refers to no envelope.
		if m := snd.msgs[0]; m.Envelope != nil || m.Headers != nil || m.Key != "" {
			t.Errorf("a message kept for reuse still holds %+v", m)
		}
	})
	for _, c := range []struct {
		name string
		snd  driver.Sender
		n    int
	}{
		{"retaining", &captureSender{}, 30},
		{"says it retains", &unretainingSender{retains: true}, 30},
		{"batch of one", &unretainingSender{}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := queue.NewPublisher(c.snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
			first := envelopes(t, c.n, 10)
			if err := p.PublishBatch(ctx, first); err != nil {
				t.Fatal(err)
			}
			var kept []*driver.Message
			switch s := c.snd.(type) {
			case *captureSender:
				kept = slices.Clone(s.msgs)
			case *unretainingSender:
				kept = slices.Clone(s.msgs)
			}
			for range 3 {
				if err := p.PublishBatch(ctx, envelopes(t, c.n, 500)); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range kept {
				want, _ := first[i].Envelope.Encode()
				if m.Envelope != first[i].Envelope || !bytes.Equal(m.Body, want) {
					t.Fatalf("message %d of the first batch changed after later batches: %+v", i, m)
				}
			}
		})
	}
}

// TestPublishBatchReusedMemoryAllocations: through a driver.Unretaining
// sender, a batch built in an earlier one's memory allocates neither its
// messages nor its bodies: at least three allocations fewer than through
// a sender that may keep them.
func TestPublishBatchReusedMemoryAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	ctx := context.Background()
	batch := envelopes(t, 100, 100)
	allocs := func(snd driver.Sender) float64 {
		p := queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
		return testing.AllocsPerRun(50, func() {
			if err := p.PublishBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
		})
	}
	kept, reused := allocs(&benchDriver{}), allocs(&nopUnretaining{})
	if reused > kept-3 {
		t.Errorf("PublishBatch of 100: %v allocations with memory reused, %v without; want at least 3 fewer", reused, kept)
	}
}

// nopUnretaining sends nothing and keeps nothing.
type nopUnretaining struct{}

func (nopUnretaining) Send(context.Context, []*driver.Message) error { return nil }
func (nopUnretaining) RetainsNothing() bool                          { return true }
