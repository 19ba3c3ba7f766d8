// Package redis is a shared idempotency store on Redis, built on
// github.com/redis/go-redis/v9. It implements idempotency.Claimer: a claim
// is one SET NX PX (atomic, with a lease that expires if its holder dies),
// and Complete and Release are Lua scripts that only touch the caller's own
// claim. Keys are meta.id verbatim (any bytes) under a prefix.
//
//	store := redis.New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"}))
//	c := queue.NewConsumer(rcv, snd, queue.WithMiddleware(idempotency.Middleware(store)))
package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue/transports/core/idempotency"
	goredis "github.com/redis/go-redis/v9"
)

// DefaultPrefix is put before every key unless WithPrefix says otherwise.
const DefaultPrefix = "bq:idempotency:"

// DefaultTTL is how long a handled id is remembered unless WithTTL says
// otherwise: longer than any redelivery takes.
const DefaultTTL = 7 * 24 * time.Hour

// The values a key holds: done once handled, claimPrefix+owner while claimed.
const (
	done        = "done"
	claimPrefix = "claim:"
)

// Store is an idempotency.Claimer on Redis. It is safe for concurrent use.
type Store struct {
	rdb    goredis.UniversalClient
	prefix string
	ttl    time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix (default DefaultPrefix), so several
// consumers can share a server without sharing ids.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithTTL sets how long a handled id is remembered (default DefaultTTL; 0
// keeps it until Forget).
func WithTTL(d time.Duration) Option { return func(s *Store) { s.ttl = d } }

// New returns a Store on rdb (a *redis.Client, a cluster or a ring client),
// which the caller keeps ownership of.
func New(rdb goredis.UniversalClient, opts ...Option) *Store {
	s := &Store{rdb: rdb, prefix: DefaultPrefix, ttl: DefaultTTL}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ idempotency.Claimer = (*Store)(nil)

func (s *Store) key(k string) string { return s.prefix + k }

// Seen implements idempotency.Store.
func (s *Store) Seen(ctx context.Context, key string) (bool, error) {
	v, err := s.rdb.Get(ctx, s.key(key)).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("babelqueue/idempotency/redis: GET: %w", err)
	}
	return v == done, nil
}

// Remember implements idempotency.Store.
func (s *Store) Remember(ctx context.Context, key string) error {
	if err := s.rdb.Set(ctx, s.key(key), done, s.ttl).Err(); err != nil {
		return fmt.Errorf("babelqueue/idempotency/redis: SET: %w", err)
	}
	return nil
}

// Forget implements idempotency.Store.
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := s.rdb.Del(ctx, s.key(key)).Err(); err != nil {
		return fmt.Errorf("babelqueue/idempotency/redis: DEL: %w", err)
	}
	return nil
}

// claimScript takes the key for ARGV[1] for ARGV[2] ms unless it is done or
// held by another owner; a claim by the same owner is extended.
var claimScript = goredis.NewScript(`
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return "claimed" end
local v = redis.call("GET", KEYS[1])
if v == false then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	return "claimed"
end
if v == "done" then return "done" end
if v == ARGV[1] then
	redis.call("PEXPIRE", KEYS[1], ARGV[2])
	return "claimed"
end
return "busy"
`)

// completeScript marks the key done if the caller holds it (or nobody
// does); ARGV[2] is the TTL in ms, 0 for none.
var completeScript = goredis.NewScript(`
local v = redis.call("GET", KEYS[1])
if v == "done" then return "ok" end
if v ~= false and v ~= ARGV[1] then return "lost" end
if tonumber(ARGV[2]) > 0 then
	redis.call("SET", KEYS[1], "done", "PX", ARGV[2])
else
	redis.call("SET", KEYS[1], "done")
end
return "ok"
`)

// releaseScript deletes the key if the caller holds it.
var releaseScript = goredis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("DEL", KEYS[1]) end
return "ok"
`)

// Claim implements idempotency.Claimer with SET NX PX.
func (s *Store) Claim(ctx context.Context, key, owner string, lease time.Duration) (idempotency.ClaimState, error) {
	res, err := claimScript.Run(ctx, s.rdb, []string{s.key(key)}, claimPrefix+owner, max(lease.Milliseconds(), 1)).Text()
	if err != nil {
		return 0, fmt.Errorf("babelqueue/idempotency/redis: claim: %w", err)
	}
	switch res {
	case "claimed":
		return idempotency.Claimed, nil
	case "done":
		return idempotency.Done, nil
	case "busy":
		return idempotency.Busy, nil
	}
	return 0, fmt.Errorf("babelqueue/idempotency/redis: claim: unexpected answer %q", res)
}

// Complete implements idempotency.Claimer.
func (s *Store) Complete(ctx context.Context, key, owner string) error {
	res, err := completeScript.Run(ctx, s.rdb, []string{s.key(key)}, claimPrefix+owner, s.ttl.Milliseconds()).Text()
	if err != nil {
		return fmt.Errorf("babelqueue/idempotency/redis: complete: %w", err)
	}
	if res == "lost" {
		return idempotency.ErrClaimLost
	}
	return nil
}

// Release implements idempotency.Claimer.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{s.key(key)}, claimPrefix+owner).Err(); err != nil {
		return fmt.Errorf("babelqueue/idempotency/redis: release: %w", err)
	}
	return nil
}
