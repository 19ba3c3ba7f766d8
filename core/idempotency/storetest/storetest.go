// Package storetest is the shared test suite of idempotency stores: every
// store module (memory, Redis, PostgreSQL) runs it against its real backend,
// so that each meets the same Claimer contract.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/idempotency"
)

// Run runs the suite. newStore returns a store whose keys do not collide
// with those of other tests (a fresh namespace or table).
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Claimer) {
	t.Run("SeenRememberForget", func(t *testing.T) { seenRememberForget(t, newStore(t)) })
	t.Run("ConcurrentCopiesRunOnce", func(t *testing.T) { concurrentCopiesRunOnce(t, newStore(t)) })
	t.Run("HandlerErrorReleasesTheClaim", func(t *testing.T) { handlerErrorReleases(t, newStore(t)) })
	t.Run("ExpiredClaimRunsAgain", func(t *testing.T) { expiredClaimRunsAgain(t, newStore(t)) })
	t.Run("OnlyTheOwnerReleasesOrCompletes", func(t *testing.T) { onlyOwner(t, newStore(t)) })
	t.Run("KeysAreVerbatim", func(t *testing.T) { keysAreVerbatim(t, newStore(t)) })
}

var ctx = context.Background()

func seenRememberForget(t *testing.T, s idempotency.Claimer) {
	if seen, err := s.Seen(ctx, "k"); err != nil || seen {
		t.Fatalf("Seen of a new key = %v, %v", seen, err)
	}
	if err := s.Remember(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if seen, err := s.Seen(ctx, "k"); err != nil || !seen {
		t.Fatalf("Seen after Remember = %v, %v", seen, err)
	}
	if st, err := s.Claim(ctx, "k", "o", time.Minute); err != nil || st != idempotency.Done {
		t.Fatalf("Claim of a remembered key = %v, %v; want done", st, err)
	}
	if err := s.Forget(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if seen, err := s.Seen(ctx, "k"); err != nil || seen {
		t.Fatalf("Seen after Forget = %v, %v", seen, err)
	}
}

// 32 concurrent copies of one id run the handler exactly once; the others
// are told it is in progress, and once it is done they see it done.
func concurrentCopiesRunOnce(t *testing.T, s idempotency.Claimer) {
	const copies = 32
	var runs, inProgress atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := idempotency.Do(ctx, s, "same-id", func(context.Context) error {
				runs.Add(1)
				// Run until every other copy was turned away (or 10 s):
				// a copy scheduled after a fixed-length run would find
				// it done, and rightly skip it as a duplicate.
				for deadline := time.Now().Add(10 * time.Second); inProgress.Load() < copies-1 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				return nil
			})
			if errors.Is(err, idempotency.ErrInProgress) {
				inProgress.Add(1)
			} else if err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("%d concurrent copies ran the handler %d times, want 1", copies, runs.Load())
	}
	if inProgress.Load() != copies-1 {
		t.Errorf("%d copies were told in progress, want %d", inProgress.Load(), copies-1)
	}
	ran, err := idempotency.Do(ctx, s, "same-id", func(context.Context) error { runs.Add(1); return nil })
	if ran || err != nil || runs.Load() != 1 {
		t.Errorf("a redelivery after success ran=%v err=%v", ran, err)
	}
}

func handlerErrorReleases(t *testing.T, s idempotency.Claimer) {
	boom := errors.New("boom")
	if _, err := idempotency.Do(ctx, s, "id", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want the handler's error", err)
	}
	if seen, _ := s.Seen(ctx, "id"); seen {
		t.Fatal("a failed handler's id was remembered")
	}
	ran, err := idempotency.Do(ctx, s, "id", func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("the redelivery after a failure ran=%v err=%v, want it to run", ran, err)
	}
}

// A claim whose holder died (never completed nor released) expires after
// its lease, and the message runs again.
func expiredClaimRunsAgain(t *testing.T, s idempotency.Claimer) {
	const lease = 300 * time.Millisecond
	if st, err := s.Claim(ctx, "crashed", "dead-process", lease); err != nil || st != idempotency.Claimed {
		t.Fatalf("Claim = %v, %v", st, err)
	}
	if st, err := s.Claim(ctx, "crashed", "other", lease); err != nil || st != idempotency.Busy {
		t.Fatalf("Claim during the lease = %v, %v; want busy", st, err)
	}
	time.Sleep(lease + 200*time.Millisecond)
	ran, err := idempotency.Do(ctx, s, "crashed", func(context.Context) error { return nil }, idempotency.WithLease(lease))
	if !ran || err != nil {
		t.Fatalf("after the lease ran=%v err=%v, want it to run", ran, err)
	}
	if seen, _ := s.Seen(ctx, "crashed"); !seen {
		t.Fatal("not remembered after the run")
	}
}

func onlyOwner(t *testing.T, s idempotency.Claimer) {
	if st, _ := s.Claim(ctx, "k", "a", time.Minute); st != idempotency.Claimed {
		t.Fatalf("Claim = %v", st)
	}
	if err := s.Release(ctx, "k", "b"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Claim(ctx, "k", "c", time.Minute); st != idempotency.Busy {
		t.Fatalf("another owner's Release dropped the claim: Claim = %v", st)
	}
	if err := s.Complete(ctx, "k", "b"); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("Complete by a non-owner = %v, want ErrClaimLost", err)
	}
	if seen, _ := s.Seen(ctx, "k"); seen {
		t.Fatal("a non-owner's Complete remembered the key")
	}
	if err := s.Complete(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	if seen, _ := s.Seen(ctx, "k"); !seen {
		t.Fatal("the owner's Complete did not remember the key")
	}
}

func keysAreVerbatim(t *testing.T, s idempotency.Claimer) {
	keys := []string{"A", "a", " a", "a ", "ключ", "k\x00z", "k:z", "k*", "'; DROP TABLE x; --", fmt.Sprint(1 << 62)}
	for _, k := range keys {
		if err := s.Remember(ctx, k); err != nil {
			t.Fatalf("Remember(%q): %v", k, err)
		}
		for _, other := range keys {
			seen, err := s.Seen(ctx, other)
			if err != nil {
				t.Fatalf("Seen(%q): %v", other, err)
			}
			if seen && other != k {
				if _, err := s.Claim(ctx, other, "x", time.Minute); err != nil {
					t.Fatal(err)
				}
				t.Fatalf("remembering %q made %q seen", k, other)
			}
		}
		if err := s.Forget(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
}
