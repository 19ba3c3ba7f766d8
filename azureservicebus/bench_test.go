package azureservicebus

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

func BenchmarkProject(b *testing.B) {
	m := drivertest.SizedMessage(b, testURN, "orders", 1<<10)
	m.Key = "customer-42"
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		_ = Project(m, now)
	}
}

func BenchmarkReconcile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Attempts(0, 3)
		_ = Gate(int32(1), true)
	}
}

// BenchmarkPublish compares SendMessage one at a time with MessageBatch
// sends of 10 (ns/op is per message either way). The figures are the test
// server's unless BQ_ASB_CONNECTION_STRING names a namespace.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 10} {
		b.Run(fmt.Sprintf("size=1024/batch=%d", batch), func(b *testing.B) {
			q := newQueue(b)
			snd := NewSender(newClient(b))
			defer snd.Close(context.Background())
			m := drivertest.SizedMessage(b, testURN, q, 1<<10)
			msgs := make([]*driver.Message, batch)
			for i := range msgs {
				msgs[i] = m
			}
			b.SetBytes(int64(len(m.Body)))
			b.ReportAllocs()
			start := time.Now()
			for sent := 0; sent < b.N; sent += batch {
				if err := snd.Send(context.Background(), msgs[:min(batch, b.N-sent)]); err != nil {
					b.Fatal(err)
				}
			}
			drivertest.ReportRate(b, b.N, start)
		})
	}
}

// BenchmarkConcurrentPublish has 8 and 32 Publish calls to one queue in
// flight at once, with and without coalescing (WithoutCoalescing): with it,
// single messages that find eight sends in flight leave together in one
// message batch.
func BenchmarkConcurrentPublish(b *testing.B) {
	drivertest.BenchmarkConcurrentPublish(b, func(b *testing.B, coalesce bool) drivertest.ConcurrentPublish {
		var opts []SenderOption
		if !coalesce {
			opts = append(opts, WithoutCoalescing())
		}
		q := newQueue(b)
		snd := NewSender(newClient(b), opts...)
		b.Cleanup(func() { _ = snd.Close(context.Background()) })
		return drivertest.ConcurrentPublish{
			Publisher: queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler))),
			Envelope:  drivertest.SizedMessage(b, testURN, q, 1<<10).Envelope,
		}
	})
}

// BenchmarkConsume is publish-ahead, then peek-lock receive → decode →
// handle → complete through the runtime: on a plain queue with 1 and 8
// handlers, and on a session-enabled queue with the messages spread over 1
// or 8 sessions, each handled one message at a time, with and without
// prefetch.
func BenchmarkConsume(b *testing.B) {
	publishAhead := func(b *testing.B, snd *Sender, q string, keys int) int {
		m := drivertest.SizedMessage(b, testURN, q, 1<<10)
		msgs := make([]*driver.Message, 0, 10)
		for sent := 0; sent < b.N; {
			msgs = msgs[:0]
			for range min(10, b.N-sent) {
				c := *m
				c.Key = fmt.Sprintf("k%d", sent%keys)
				msgs = append(msgs, &c)
				sent++
			}
			if err := snd.Send(context.Background(), msgs); err != nil {
				b.Fatal(err)
			}
		}
		return len(m.Body)
	}
	for _, handlers := range []int{1, 8} {
		b.Run(fmt.Sprintf("queue/handlers=%d", handlers), func(b *testing.B) {
			client := newClient(b)
			q := newQueue(b)
			snd := NewSender(client)
			defer snd.Close(context.Background())
			b.SetBytes(int64(publishAhead(b, snd, q, 1)))
			r := newTestReceiver(b, client, q)
			defer r.Close(context.Background())
			drivertest.BenchmarkConsume(b, r, snd, testURN, b.N, handlers, queue.WithBatchSize(20))
		})
	}
	for _, sessions := range []int{1, 8} {
		for _, prefetch := range []int{0, 10} {
			b.Run(fmt.Sprintf("sessions=%d/prefetch=%d", sessions, prefetch), func(b *testing.B) {
				client := newClient(b)
				q := newSessionQueue(b)
				snd := NewSender(client)
				defer snd.Close(context.Background())
				b.SetBytes(int64(publishAhead(b, snd, q, sessions)))
				r := newTestSessionReceiver(b, client, q, WithMaxSessions(sessions), WithSessionPrefetch(prefetch))
				defer r.Close(context.Background())
				drivertest.BenchmarkConsume(b, r, snd, testURN, b.N, sessions, queue.WithBatchSize(20))
			})
		}
	}
}

// BenchmarkVsRaw runs each row through this package and the runtime, and
// through the raw azservicebus client doing the same, sending the same
// messages (the encoded envelope as the body, the same application
// properties): the ratio of the two is what this package and the runtime
// cost on top of the client. Names: VsRaw/<row>/<impl>; msgs/s is the
// figure to compare. Against the test server these measure the client
// side only (see BENCHMARKS.md).
//
//   - publish=sync: one message sent and waited for at a time (Publisher
//     PublishEnvelope; raw: Sender.SendMessage).
//   - publish=batch: batches of 100 envelopes built beforehand
//     (PublishBatch, which encodes and projects each; raw: one MessageBatch
//     of the 100 projected messages and SendMessageBatch).
//   - consume: b.N messages published ahead, then received in peek-lock
//     mode, handled by a no-op handler and completed (raw: ReceiveMessages
//     of up to 20 and CompleteMessage for each).
func BenchmarkVsRaw(b *testing.B) {
	const batch = 100
	// messages returns the messages for q and their projections.
	messages := func(b *testing.B, q string) ([]*driver.Message, []*azservicebus.Message) {
		msgs := drivertest.OrderMessages(b, testURN, q, batch)
		sbs := make([]*azservicebus.Message, len(msgs))
		for i, m := range msgs {
			sbs[i] = Project(m, time.Now())
		}
		return msgs, sbs
	}
	rawSender := func(b *testing.B, client *azservicebus.Client, q string) *azservicebus.Sender {
		s, err := client.NewSender(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
	sendBatch := func(s *azservicebus.Sender, sbs []*azservicebus.Message) error {
		mb, err := s.NewMessageBatch(context.Background(), nil)
		if err != nil {
			return err
		}
		for _, m := range sbs {
			if err := mb.AddMessage(m, nil); err != nil {
				return err
			}
		}
		return s.SendMessageBatch(context.Background(), mb, nil)
	}
	for _, r := range []struct {
		name  string
		batch int
	}{{"publish=sync", 1}, {"publish=batch", batch}} {
		b.Run(r.name+"/babelqueue", func(b *testing.B) {
			q := newQueue(b)
			snd := NewSender(newClient(b))
			defer snd.Close(context.Background())
			msgs, _ := messages(b, q)
			drivertest.BenchmarkPublish(b, queue.NewPublisher(snd), msgs, r.batch)
		})
		b.Run(r.name+"/raw", func(b *testing.B) {
			q := newQueue(b)
			_, sbs := messages(b, q)
			s := rawSender(b, newClient(b), q)
			if err := sendBatch(s, sbs[:1]); err != nil {
				b.Fatal(err)
			}
			drivertest.BenchmarkBatches(b, r.batch, func(i, n int) error {
				if r.batch == 1 {
					return s.SendMessage(context.Background(), sbs[i%len(sbs)], nil)
				}
				return sendBatch(s, sbs[:n])
			})
		})
	}
	// publishAhead sends n of the messages to q, untimed.
	publishAhead := func(b *testing.B, client *azservicebus.Client, q string, n int) {
		_, sbs := messages(b, q)
		s := rawSender(b, client, q)
		for sent := 0; sent < n; sent += batch {
			if err := sendBatch(s, sbs[:min(batch, n-sent)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("consume/babelqueue", func(b *testing.B) {
		client := newClient(b)
		q := newQueue(b)
		publishAhead(b, client, q, b.N)
		snd := NewSender(client)
		defer snd.Close(context.Background())
		r := newTestReceiver(b, client, q)
		defer r.Close(context.Background())
		drivertest.BenchmarkConsume(b, r, snd, testURN, b.N, 1, queue.WithBatchSize(20),
			queue.WithLogger(slog.New(slog.DiscardHandler)))
	})
	b.Run("consume/raw", func(b *testing.B) {
		client := newClient(b)
		q := newQueue(b)
		publishAhead(b, client, q, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		r, err := client.NewReceiverForQueue(q, nil) // peek-lock
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close(context.Background())
		for got := 0; got < b.N; {
			msgs, err := r.ReceiveMessages(context.Background(), 20, nil)
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range msgs {
				if err := r.CompleteMessage(context.Background(), m, nil); err != nil {
					b.Fatal(err)
				}
			}
			got += len(msgs)
		}
		b.StopTimer()
		drivertest.ReportRate(b, b.N, start)
	})
}
