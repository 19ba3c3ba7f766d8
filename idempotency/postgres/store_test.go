package postgres_test

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
	bqpg "github.com/babelqueue/transports/idempotency/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvPort names the port of the PostgreSQL server the tests use on
// 127.0.0.1 (default 15432, as scripts/postgres-server.sh starts it).
const EnvPort = "BQ_POSTGRES_PORT"

var tableNo atomic.Int64

func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	port := os.Getenv(EnvPort)
	if port == "" {
		port = "15432"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable", port))
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		if p != nil {
			p.Close()
		}
		drivertest.NoServer(t, fmt.Sprintf("no PostgreSQL server on 127.0.0.1:%s (%v): run scripts/postgres-server.sh start", port, err))
	}
	t.Cleanup(p.Close)
	return p
}

func newStore(t *testing.T, p *pgxpool.Pool, opts ...bqpg.Option) *bqpg.Store {
	t.Helper()
	table := fmt.Sprintf("bq_test_%d_%d", time.Now().UnixNano()%1e9, tableNo.Add(1))
	s := bqpg.New(p, append([]bqpg.Option{bqpg.WithTable(table)}, opts...)...)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil { // idempotent
		t.Fatalf("second migration: %v", err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return s
}

// TestStoreContract runs the shared store suite on a real PostgreSQL server.
func TestStoreContract(t *testing.T) {
	p := pool(t)
	storetest.Run(t, func(t *testing.T) idempotency.Claimer { return newStore(t, p) })
}

// Cleanup removes ids handled longer ago than the TTL, and nothing newer.
func TestCleanup(t *testing.T) {
	p := pool(t)
	s := newStore(t, p, bqpg.WithTTL(200*time.Millisecond))
	ctx := context.Background()
	if err := s.Remember(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := s.Remember(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	n, err := s.Cleanup(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v; want 1 row", n, err)
	}
	if seen, _ := s.Seen(ctx, "new"); !seen {
		t.Error("Cleanup removed a fresh id")
	}
	if seen, _ := s.Seen(ctx, "old"); seen {
		t.Error("Cleanup kept an expired id")
	}
}

func TestInvalidTableIsAnError(t *testing.T) {
	s := bqpg.New(nil, bqpg.WithTable("x; DROP TABLE y"))
	if _, err := s.Seen(context.Background(), "k"); err == nil {
		t.Fatal("an invalid table name was accepted")
	}
}

// With the server unreachable the delivery fails (it is retried) and the
// handler does not run.
func TestUnreachableFailsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	port, _ := drivertest.FreePort()
	p, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=1", port))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ran := false
	if _, err := idempotency.Do(ctx, bqpg.New(p), "id", func(context.Context) error { ran = true; return nil }); err == nil || ran {
		t.Fatalf("err=%v ran=%v: an unreachable store must fail the delivery without running the handler", err, ran)
	}
}
