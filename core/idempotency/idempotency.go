// Package idempotency collapses at-least-once delivery into an exactly-once
// effect: a seen-set keyed on meta.id, remembered only after the handler
// succeeds. It is post-success dedupe, not an in-flight lock: two concurrent
// deliveries of one id may both run.
//
// A message without a usable meta.id cannot be deduplicated and always runs
// (fail open). A handler error leaves the id unmarked, so a redelivery runs
// again.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/babelqueue/transports/core/queue"
)

// Store is a seen-set. Implementations backed by Redis or a database share
// one set across a fleet; MemoryStore serves one process.
type Store interface {
	// Seen reports whether key was remembered.
	Seen(ctx context.Context, key string) (bool, error)
	// Remember marks key as handled.
	Remember(ctx context.Context, key string) error
	// Forget evicts key, so its next delivery runs again.
	Forget(ctx context.Context, key string) error
}

// Do runs fn unless key was already remembered in store, and remembers key
// when fn succeeds. ran reports whether fn was invoked. An empty key always
// runs fn. A store error on Seen is returned without running fn (the
// delivery is retried rather than risking a second effect); an error on
// Remember after fn succeeded is returned so the caller can report it, but
// the effect has happened.
func Do(ctx context.Context, store Store, key string, fn func(context.Context) error) (ran bool, err error) {
	if key == "" {
		return true, fn(ctx)
	}
	seen, err := store.Seen(ctx, key)
	if err != nil {
		return false, fmt.Errorf("babelqueue: idempotency store: %w", err)
	}
	if seen {
		return false, nil
	}
	if err := fn(ctx); err != nil {
		return true, err
	}
	if err := store.Remember(ctx, key); err != nil {
		return true, &RememberError{Key: key, Err: err}
	}
	return true, nil
}

// RememberError reports that the handler succeeded but the store could not
// remember its key; a redelivery may run the effect again.
type RememberError struct {
	Key string
	Err error
}

// Error implements error.
func (e *RememberError) Error() string {
	return fmt.Sprintf("babelqueue: idempotency store: remembering %q: %v", e.Key, e.Err)
}

// Unwrap returns the store's error.
func (e *RememberError) Unwrap() error { return e.Err }

// MemoryStore is a process-local Store. The zero value is ready to use.
type MemoryStore struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// Seen implements Store.
func (s *MemoryStore) Seen(_ context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[key]
	return ok, nil
}

// Remember implements Store.
func (s *MemoryStore) Remember(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]struct{}{}
	}
	s.seen[key] = struct{}{}
	return nil
}

// Forget implements Store.
func (s *MemoryStore) Forget(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, key)
	return nil
}

// Len returns the number of remembered keys.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// Middleware skips (and acknowledges) a message whose meta.id store already
// remembers, and remembers the id after the handler succeeds. A store
// failure on lookup fails the delivery (it is retried) rather than risking
// a second effect.
func Middleware(store Store) queue.Middleware {
	return func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error {
			_, err := Do(ctx, store, m.Envelope.Meta.ID, func(ctx context.Context) error { return next(ctx, m) })
			var re *RememberError
			if errors.As(err, &re) {
				// The effect happened; retrying would repeat it. Report and ack.
				slog.Default().Warn("babelqueue: idempotency store could not remember a handled message",
					slog.String("id", re.Key), slog.Any("error", re.Err))
				return nil
			}
			return err
		}
	}
}
