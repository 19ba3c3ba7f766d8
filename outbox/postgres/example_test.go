package outbox_test

import (
	"context"
	"log"

	"github.com/babelqueue/transports/kafka"
	outbox "github.com/babelqueue/transports/outbox/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Write an order and the message announcing it in one transaction, and
// relay the message to Kafka.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:15432/postgres?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := outbox.Migrate(ctx, pool, ""); err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// … the service's own writes in tx …
	if _, err := outbox.Publish(ctx, tx, "orders", "urn:babel:orders:created", map[string]any{"order_id": 1042}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	snd, err := kafka.NewSender([]string{"127.0.0.1:9092"})
	if err != nil {
		log.Fatal(err)
	}
	defer snd.Close(ctx)
	if err := outbox.NewRelay(pool, snd).Run(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}
