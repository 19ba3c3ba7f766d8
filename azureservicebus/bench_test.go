package azureservicebus

import (
	"context"
	"fmt"
	"testing"
	"time"

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
