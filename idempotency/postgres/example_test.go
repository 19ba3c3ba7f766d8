package postgres_test

import (
	"context"
	"log"

	"github.com/babelqueue/transports/core/idempotency"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
	bqpg "github.com/babelqueue/transports/idempotency/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Deduplicate a consumer fleet on PostgreSQL: each meta.id's handler runs
// once, whichever consumer gets the copies.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:15432/postgres?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := bqpg.New(pool)
	if err := store.Migrate(ctx); err != nil { // or run store.MigrationSQL() with your migrations
		log.Fatal(err)
	}

	broker := memqueue.New() // any driver: kafka, sqs, pulsar, azureservicebus
	c := queue.NewConsumer(broker.Receiver("orders"), broker.Sender(),
		queue.WithMiddleware(idempotency.Middleware(store)))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		log.Printf("charging order %s once", m.Envelope.Data())
		return nil
	})
	_ = c.Run(ctx)
}
