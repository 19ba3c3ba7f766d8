package drivertest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// publishBatchReusesMemory publishes batches of different sizes, bodies,
// keys and headers from several goroutines at once through one Publisher,
// and checks that every message arrives exactly as its envelope encodes,
// with its own header. When the Sender says it keeps nothing once a Send
// returned (driver.Unretaining), the Publisher builds each batch in the
// memory of an earlier one; a driver that still read a body, or a
// message, after its Send returned would deliver another message's bytes
// here, and under -race would race with the next batch written over them.
// For any other Sender the case checks the same of batches built afresh.
func (s *suite) publishBatchReusesMemory(t *testing.T) {
	q := s.h.NewQueue(t)
	snd := s.h.Sender(t)
	if u, ok := snd.(driver.Unretaining); ok && u.RetainsNothing() {
		t.Log("the Sender keeps nothing: batches reuse their memory")
	}
	p := queue.NewPublisher(snd, queue.WithPublisherLogger(slog.New(slog.DiscardHandler)))
	type sent struct{ body, tenant string }
	var (
		mu   sync.Mutex
		want = map[string]sent{} // by message ID
		wg   sync.WaitGroup
	)
	const publishers, rounds = 3, 4
	for g := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				batch := make([]queue.Outgoing, 2+(g*rounds+r)*7%23)
				for i := range batch {
					env, err := core.New(urnA, map[string]string{
						"note": strings.Repeat(string(rune('a'+(g*rounds+r)%26)), 10+(i*37+g*11+r*5)%700),
					}, core.WithQueue(q))
					if err != nil {
						t.Error(err)
						return
					}
					body, err := env.Encode()
					if err != nil {
						t.Error(err)
						return
					}
					w := sent{body: string(body)}
					if (i+r)%3 != 0 {
						w.tenant = fmt.Sprintf("t-%d-%d-%d", g, r, i)
						batch[i].Options = append(batch[i].Options, queue.WithHeader("tenant", w.tenant))
					}
					if (i+g)%2 == 0 {
						batch[i].Options = append(batch[i].Options, queue.WithKey(fmt.Sprint("k", i%4)))
					}
					batch[i].Envelope = env
					mu.Lock()
					want[env.Meta.ID] = w
					mu.Unlock()
				}
				if err := p.PublishBatch(context.Background(), batch); err != nil {
					t.Errorf("PublishBatch of %d: %v", len(batch), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, d := range s.drain(t, q, len(want)) {
		env, err := core.Decode(d.Body)
		if err != nil {
			t.Errorf("a delivery does not decode: %v\n%s", err, d.Body)
			continue
		}
		w, ok := want[env.Meta.ID]
		switch {
		case !ok:
			t.Errorf("message %s arrived twice or was never sent:\n%s", env.Meta.ID, d.Body)
		case string(d.Body) != w.body:
			t.Errorf("message %s arrived as\n %s\nwant\n %s", env.Meta.ID, d.Body, w.body)
		case d.Headers["tenant"] != w.tenant:
			t.Errorf("message %s arrived with tenant header %q, want %q", env.Meta.ID, d.Headers["tenant"], w.tenant)
		}
		delete(want, env.Meta.ID)
	}
}
