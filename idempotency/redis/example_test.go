package redis_test

import (
	"context"
	"log"

	"github.com/babelqueue/transports/core/idempotency"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
	bqredis "github.com/babelqueue/transports/idempotency/redis"
	goredis "github.com/redis/go-redis/v9"
)

// Deduplicate a consumer fleet on one Redis server: each meta.id's handler
// runs once, whichever consumer gets the copies.
func Example() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:16379"})
	defer rdb.Close()
	store := bqredis.New(rdb, bqredis.WithPrefix("billing:"))

	broker := memqueue.New() // any driver: kafka, sqs, pulsar, azureservicebus
	c := queue.NewConsumer(broker.Receiver("orders"), broker.Sender(),
		queue.WithMiddleware(idempotency.Middleware(store)))
	c.Handle("urn:babel:orders:created", func(ctx context.Context, m *queue.Message) error {
		log.Printf("charging order %s once", m.Envelope.Data())
		return nil
	})
	_ = c.Run(context.Background())
}
