// Package idempotency collapses at-least-once delivery into an exactly-once
// effect, keyed on meta.id.
//
// A Store is the contract's seen-set: Seen, Remember, Forget. A store that
// also implements Claimer gives the atomic contract every shared store must
// meet, and which Do and Middleware use whenever the store has it:
//
//	claim → run → remember   (or release the claim when the handler fails)
//
// Claim is atomic: of any number of concurrent copies of one id, exactly
// one holds the claim and runs; the others see ErrInProgress (the delivery
// is retried after the backoff, by which time the holder has remembered the
// id, so the retry is acknowledged without running). A claim carries a
// lease: if the process holding it dies, the claim expires and a later
// delivery runs again. Release and Complete only touch the caller's own
// claim.
//
// A message without a usable meta.id cannot be deduplicated and always runs
// (fail open). A handler error releases the claim, so a redelivery runs
// again.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/babelqueue/transports/core/queue"
	"github.com/google/uuid"
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

// ClaimState is the result of a Claim.
type ClaimState int

// The results of a Claim.
const (
	// Claimed: the caller holds the key until its lease ends and must run
	// the handler, then Complete or Release.
	Claimed ClaimState = iota + 1
	// Done: the key was remembered; the message was handled before.
	Done
	// Busy: another owner holds an unexpired claim on the key.
	Busy
)

// String implements fmt.Stringer.
func (s ClaimState) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case Done:
		return "done"
	case Busy:
		return "busy"
	}
	return fmt.Sprintf("ClaimState(%d)", int(s))
}

// Claimer is the atomic contract of a shared idempotency store.
//
//   - Claim atomically takes key for owner for lease, unless key is
//     remembered (Done) or claimed by another owner whose lease has not
//     ended (Busy). An expired claim is taken over.
//   - Complete remembers key, ending owner's claim. If another owner has
//     claimed key since (owner's lease ran out), it returns ErrClaimLost and
//     changes nothing.
//   - Release drops owner's claim so the next delivery runs; it is a no-op
//     when owner does not hold the claim.
//
// Keys are meta.id verbatim: any bytes.
type Claimer interface {
	Store
	Claim(ctx context.Context, key, owner string, lease time.Duration) (ClaimState, error)
	Complete(ctx context.Context, key, owner string) error
	Release(ctx context.Context, key, owner string) error
}

// ErrInProgress is the delivery error of a copy whose id another consumer is
// handling right now. It is an ordinary (retryable) handler error: the copy
// comes back after the backoff and is then acknowledged as a duplicate.
var ErrInProgress = errors.New("babelqueue: idempotency: another delivery of this message is being handled")

// ErrClaimLost is returned by Complete when the caller's claim expired and
// another owner claimed the key.
var ErrClaimLost = errors.New("babelqueue: idempotency: claim lost to another owner")

// DefaultLease is how long a claim lasts when no lease is given: longer
// than any handler should run, short enough that a crashed process's
// messages run again soon.
const DefaultLease = 5 * time.Minute

// Option configures Do and Middleware.
type Option func(*config)

type config struct {
	lease    time.Duration
	logger   *slog.Logger
	failOpen bool
}

// WithLease sets how long a claim lasts (default DefaultLease). Set it above
// the longest handler run: a claim that expires while its handler still
// runs lets a second copy run too.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.lease = d
		}
	}
}

// WithLogger logs to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithFailOpen chooses what an unreachable store means. By default (false,
// fail closed) the delivery fails and is retried after the backoff, and the
// handler does not run: no effect can happen twice. With true the handler
// runs anyway (logged at Warn), trading possible duplicates for progress.
func WithFailOpen(open bool) Option { return func(c *config) { c.failOpen = open } }

func newConfig(opts []Option) config {
	c := config{lease: DefaultLease, logger: slog.Default()}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Do runs fn unless key was already handled, and remembers key when fn
// succeeds. ran reports whether fn was invoked. An empty key always runs fn.
//
// With a Claimer store, Do claims key first: a copy handled elsewhere right
// now returns ErrInProgress without running fn, and a failing fn releases
// the claim. With a plain Store, Do is check-then-act: two concurrent copies
// of one id may both run.
//
// A store error before fn is returned without running fn (the delivery is
// retried rather than risking a second effect); an error remembering key
// after fn succeeded is returned as a *RememberError: the effect happened.
func Do(ctx context.Context, store Store, key string, fn func(context.Context) error, opts ...Option) (ran bool, err error) {
	if key == "" {
		return true, fn(ctx)
	}
	cfg := newConfig(opts)
	if cl, ok := store.(Claimer); ok {
		return doClaimed(ctx, cl, key, fn, cfg)
	}
	seen, err := store.Seen(ctx, key)
	if err != nil {
		return cfg.unreachable(ctx, key, fmt.Errorf("babelqueue: idempotency store: %w", err), fn)
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

func doClaimed(ctx context.Context, store Claimer, key string, fn func(context.Context) error, cfg config) (bool, error) {
	owner := uuid.NewString()
	state, err := store.Claim(ctx, key, owner, cfg.lease)
	if err != nil {
		return cfg.unreachable(ctx, key, fmt.Errorf("babelqueue: idempotency store: claiming %q: %w", key, err), fn)
	}
	switch state {
	case Done:
		return false, nil
	case Busy:
		return false, ErrInProgress
	case Claimed:
	default:
		return false, fmt.Errorf("babelqueue: idempotency store: claiming %q: unexpected state %v", key, state)
	}
	if err := fn(ctx); err != nil {
		// Released with a context of its own: a handler cut short by
		// shutdown must still give its claim back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if rerr := store.Release(rctx, key, owner); rerr != nil {
			cfg.logger.Warn("babelqueue: idempotency store could not release a claim; it expires after its lease",
				slog.String("id", key), slog.Duration("lease", cfg.lease), slog.Any("error", rerr))
		}
		cancel()
		return true, err
	}
	if err := store.Complete(context.WithoutCancel(ctx), key, owner); err != nil {
		return true, &RememberError{Key: key, Err: err}
	}
	return true, nil
}

// unreachable applies the fail-open or fail-closed choice to a store error
// met before the handler ran.
func (c config) unreachable(ctx context.Context, key string, err error, fn func(context.Context) error) (bool, error) {
	if !c.failOpen {
		return false, err
	}
	c.logger.Warn("babelqueue: idempotency store unreachable; running the handler anyway (fail-open)",
		slog.String("id", key), slog.Any("error", err))
	return true, fn(ctx)
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

// DefaultTTL is how long a MemoryStore remembers a handled id unless its
// TTL says otherwise: a week, as the Redis and PostgreSQL stores do.
const DefaultTTL = 7 * 24 * time.Hour

// MemoryStore is a process-local Claimer. The zero value is ready to use.
//
// A handled id is remembered for TTL, after which it is forgotten and its
// memory freed: a process that runs for months does not keep every id it
// ever handled.
type MemoryStore struct {
	// TTL is how long a handled id is remembered: 0 means DefaultTTL, a
	// negative TTL forever. Set it before first use.
	TTL time.Duration

	mu   sync.Mutex
	keys map[string]memEntry
	// done lists the handled ids in the order they were remembered, with
	// their expiry, from head on: what expires first is at the front.
	done []memExpiry
	head int
	now  func() time.Time
}

type memEntry struct {
	done  bool
	owner string
	until time.Time // a claim's lease, or when a handled id is forgotten (zero: never)
}

type memExpiry struct {
	key   string
	until time.Time
}

// NewMemoryStore returns an empty MemoryStore that remembers a handled id
// for DefaultTTL.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

func (s *MemoryStore) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

func (s *MemoryStore) init() {
	if s.keys == nil {
		s.keys = map[string]memEntry{}
	}
}

// live returns the entry of key, a handled id past its TTL counting as
// none. s.mu is held.
func (s *MemoryStore) live(key string, now time.Time) (memEntry, bool) {
	e, ok := s.keys[key]
	if ok && e.done && !e.until.IsZero() && !now.Before(e.until) {
		return memEntry{}, false
	}
	return e, ok
}

// remember marks key handled, and forgets the handled ids whose TTL has
// passed. s.mu is held.
func (s *MemoryStore) remember(key string) {
	s.init()
	now := s.clock()
	s.expire(now)
	ttl := s.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < 0 {
		s.keys[key] = memEntry{done: true}
		return
	}
	until := now.Add(ttl)
	s.keys[key] = memEntry{done: true, until: until}
	s.done = append(s.done, memExpiry{key, until})
}

// expire forgets the handled ids whose TTL has passed by now. s.mu is held.
func (s *MemoryStore) expire(now time.Time) {
	for s.head < len(s.done) && !now.Before(s.done[s.head].until) {
		x := s.done[s.head]
		s.done[s.head] = memExpiry{}
		s.head++
		// The id may have been remembered again since, or forgotten.
		if e, ok := s.keys[x.key]; ok && e.done && e.until.Equal(x.until) {
			delete(s.keys, x.key)
		}
	}
	if s.head > 0 && s.head >= len(s.done)/2 {
		s.done = append(s.done[:0], s.done[s.head:]...)
		clear(s.done[len(s.done):cap(s.done)])
		s.head = 0
	}
}

// Seen implements Store.
func (s *MemoryStore) Seen(_ context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, _ := s.live(key, s.clock())
	return e.done, nil
}

// Remember implements Store.
func (s *MemoryStore) Remember(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remember(key)
	return nil
}

// Forget implements Store.
func (s *MemoryStore) Forget(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
	return nil
}

// Claim implements Claimer.
func (s *MemoryStore) Claim(_ context.Context, key, owner string, lease time.Duration) (ClaimState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	now := s.clock()
	e, ok := s.live(key, now)
	switch {
	case e.done:
		return Done, nil
	case ok && e.owner != owner && now.Before(e.until):
		return Busy, nil
	}
	s.keys[key] = memEntry{owner: owner, until: now.Add(lease)}
	return Claimed, nil
}

// Complete implements Claimer.
func (s *MemoryStore) Complete(_ context.Context, key, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.live(key, s.clock()); ok && !e.done && e.owner != owner {
		return ErrClaimLost
	}
	s.remember(key)
	return nil
}

// Release implements Claimer.
func (s *MemoryStore) Release(_ context.Context, key, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.keys[key]; ok && !e.done && e.owner == owner {
		delete(s.keys, key)
	}
	return nil
}

// Len returns the number of remembered keys (handled ids within their TTL).
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	n := 0
	for k := range s.keys {
		if e, _ := s.live(k, now); e.done {
			n++
		}
	}
	return n
}

// Middleware acknowledges, without running the handler, a message whose
// meta.id was already handled (outcome queue.OutcomeSkipped), and remembers
// the id after the handler succeeds. With a Claimer store, concurrent copies
// of one id run the handler once (see Do). A store failure before the
// handler fails the delivery (it is retried) rather than risking a second
// effect.
func Middleware(store Store, opts ...Option) queue.Middleware {
	cfg := newConfig(opts)
	return func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error {
			ran, err := Do(ctx, store, m.Envelope.Meta.ID, func(ctx context.Context) error { return next(ctx, m) }, opts...)
			var re *RememberError
			switch {
			case errors.As(err, &re):
				// The effect happened; retrying would repeat it. Report and ack.
				cfg.logger.Warn("babelqueue: idempotency store could not remember a handled message",
					slog.String("id", re.Key), slog.Any("error", re.Err))
				return nil
			case err == nil && !ran:
				return queue.ErrSkip
			}
			return err
		}
	}
}
