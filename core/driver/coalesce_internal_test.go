package driver

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// TestCoalescerForgetsIdleQueues: a queue with nothing in flight and
// nothing waiting leaves the Coalescer's map, whether its last send went
// out alone or shared, so that publishing to many queues over time does not
// grow it.
func TestCoalescerForgetsIdleQueues(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	c := NewCoalescer(1, 10, func(_ context.Context, msgs []*Message) []error {
		once.Do(func() { <-gate }) // hold the first send so that others wait and share
		return make([]error, len(msgs))
	})
	var wg sync.WaitGroup
	for i := range 200 {
		q := fmt.Sprintf("q%d", i%50)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Send(context.Background(), &Message{Queue: q}); err != nil {
				t.Error(err)
			}
		}()
	}
	close(gate)
	wg.Wait()
	for i := range 1000 { // one at a time: each goes out alone
		if err := c.Send(context.Background(), &Message{Queue: fmt.Sprintf("solo%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.queues); n != 0 {
		t.Fatalf("%d queues still held with nothing in flight, want 0", n)
	}
}
