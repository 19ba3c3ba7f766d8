package idempotency

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A MemoryStore forgets a handled id once its TTL has passed, and frees
// its memory: a long-running process does not keep every id it handled.
func TestMemoryStoreForgetsAfterTTL(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	s := &MemoryStore{TTL: time.Hour, now: func() time.Time { return now }}
	for i := range 1000 {
		if err := s.Remember(ctx, fmt.Sprint("old-", i)); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(30 * time.Minute)
	if state, _ := s.Claim(ctx, "new", "me", time.Minute); state != Claimed {
		t.Fatalf("claim of a new id: %v", state)
	}
	if err := s.Complete(ctx, "new", "me"); err != nil {
		t.Fatal(err)
	}
	if seen, _ := s.Seen(ctx, "old-0"); !seen {
		t.Error("an id handled 30 minutes ago, with a TTL of an hour, is not seen")
	}
	now = now.Add(31 * time.Minute) // the old ids are past their hour, "new" is not
	if seen, _ := s.Seen(ctx, "old-0"); seen {
		t.Error("an id handled 61 minutes ago, with a TTL of an hour, is still seen")
	}
	if state, _ := s.Claim(ctx, "old-1", "me", time.Minute); state != Claimed {
		t.Errorf("an expired id claims as %v, want Claimed", state)
	}
	if state, _ := s.Claim(ctx, "new", "other", time.Minute); state != Done {
		t.Errorf("an id within its TTL claims as %v, want Done", state)
	}
	if err := s.Remember(ctx, "newer"); err != nil { // a write sweeps what expired
		t.Fatal(err)
	}
	if n := s.Len(); n != 2 {
		t.Errorf("Len = %d, want 2 (new, newer)", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.keys); n > 3 { // new, newer and the claim of old-1
		t.Errorf("%d keys in memory after the old ones expired, want 3", n)
	}
	if n := len(s.done) - s.head; n != 2 {
		t.Errorf("%d ids waiting to expire, want 2", n)
	}
}

// Remembered again after a Forget, an id keeps its new TTL: the expiry of
// the first remembering does not forget it.
func TestMemoryStoreRememberedAgainKeepsItsNewTTL(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	s := &MemoryStore{TTL: time.Hour, now: func() time.Time { return now }}
	_ = s.Remember(ctx, "k")
	now = now.Add(50 * time.Minute)
	_ = s.Forget(ctx, "k")
	_ = s.Remember(ctx, "k")
	now = now.Add(20 * time.Minute) // past the first hour, within the second
	_ = s.Remember(ctx, "other")    // sweeps the first expiry
	if seen, _ := s.Seen(ctx, "k"); !seen {
		t.Error("an id remembered again 20 minutes ago was forgotten by its first expiry")
	}
}

// The zero value remembers for DefaultTTL; a negative TTL forever.
func TestMemoryStoreDefaultAndForever(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	def := &MemoryStore{now: func() time.Time { return now }}
	ever := &MemoryStore{TTL: -1, now: func() time.Time { return now }}
	_ = def.Remember(ctx, "k")
	_ = ever.Remember(ctx, "k")
	now = now.Add(DefaultTTL - time.Second)
	if seen, _ := def.Seen(ctx, "k"); !seen {
		t.Error("the zero value forgot an id before DefaultTTL")
	}
	now = now.Add(time.Second)
	if seen, _ := def.Seen(ctx, "k"); seen {
		t.Error("the zero value still remembers an id at DefaultTTL")
	}
	now = now.Add(100 * DefaultTTL)
	if seen, _ := ever.Seen(ctx, "k"); !seen {
		t.Error("a negative TTL forgot an id")
	}
}
