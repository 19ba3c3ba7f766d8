package queue

import (
	"math/rand/v2"
	"testing"

	"github.com/babelqueue/transports/core/driver"
)

// A lane gives its deliveries back in the order they came, and one that
// never empties (a hot key with a backlog) keeps an array the size of what
// it holds, not of everything that went through it.
func TestLaneKeepsOrderAndStaysSmall(t *testing.T) {
	const ops, maxLive = 200_000, 20
	rng := rand.New(rand.NewPCG(1, 2))
	var l lane
	dels := make([]driver.Delivery, ops)
	pushed, popped := 0, 0
	for pushed < ops {
		live := pushed - popped
		if live == 0 || (live < maxLive && rng.IntN(2) == 0) {
			l.push(waiting{del: &dels[pushed]})
			pushed++
		} else {
			if got := l.pop().del; got != &dels[popped] {
				t.Fatalf("pop %d: got another delivery", popped)
			}
			popped++
		}
		if c := cap(l.queue); c > 4*maxLive {
			t.Fatalf("after %d pushes with at most %d held, the lane's array holds %d", pushed, maxLive, c)
		}
	}
	for popped < pushed {
		if got := l.pop().del; got != &dels[popped] {
			t.Fatalf("pop %d: got another delivery", popped)
		}
		popped++
	}
	if l.head != 0 || len(l.queue) != 0 {
		t.Fatalf("emptied lane: head %d, len %d; want both 0", l.head, len(l.queue))
	}
	for _, w := range l.queue[:cap(l.queue)] {
		if w.del != nil {
			t.Fatal("an emptied lane still points at a delivery")
		}
	}
}
