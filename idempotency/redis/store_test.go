package redis_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/idempotency"
	"github.com/babelqueue/transports/core/idempotency/storetest"
	bqredis "github.com/babelqueue/transports/idempotency/redis"
	goredis "github.com/redis/go-redis/v9"
)

// EnvPort names the port of the Redis server the tests use on 127.0.0.1
// (default 16379, as scripts/redis-server.sh starts it).
const EnvPort = "BQ_REDIS_PORT"

var testNo atomic.Int64

func client(t *testing.T) *goredis.Client {
	t.Helper()
	port := os.Getenv(EnvPort)
	if port == "" {
		port = "16379"
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + port})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		drivertest.NoServer(t, fmt.Sprintf("no Redis server on 127.0.0.1:%s (%v): run scripts/redis-server.sh start", port, err))
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestStoreContract runs the shared store suite on a real Redis server.
func TestStoreContract(t *testing.T) {
	rdb := client(t)
	storetest.Run(t, func(t *testing.T) idempotency.Claimer {
		return bqredis.New(rdb, bqredis.WithPrefix(fmt.Sprintf("bq-test-%d-%d:", time.Now().UnixNano(), testNo.Add(1))))
	})
}

// A remembered id expires after the TTL.
func TestTTL(t *testing.T) {
	rdb := client(t)
	s := bqredis.New(rdb, bqredis.WithPrefix(fmt.Sprintf("bq-ttl-%d:", time.Now().UnixNano())), bqredis.WithTTL(300*time.Millisecond))
	ctx := context.Background()
	if err := s.Remember(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if seen, _ := s.Seen(ctx, "k"); !seen {
		t.Fatal("not remembered")
	}
	time.Sleep(500 * time.Millisecond)
	if seen, _ := s.Seen(ctx, "k"); seen {
		t.Fatal("still remembered after its TTL")
	}
}

// With the server unreachable, the middleware fails the delivery (it is
// retried) without running the handler, unless the user chose fail-open.
func TestUnreachableFailsClosed(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	s := bqredis.New(rdb)
	ran := false
	if _, err := idempotency.Do(context.Background(), s, "id", func(context.Context) error { ran = true; return nil }); err == nil || ran {
		t.Fatalf("err=%v ran=%v: an unreachable store must fail the delivery without running the handler", err, ran)
	}
	ran = false
	if _, err := idempotency.Do(context.Background(), s, "id", func(context.Context) error { ran = true; return nil },
		idempotency.WithFailOpen(true)); err != nil || !ran {
		t.Fatalf("fail-open: err=%v ran=%v, want the handler run", err, ran)
	}
}
