package queue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/memqueue"
	"github.com/babelqueue/transports/core/queue"
)

// Every envelope of a batch is checked before anything is sent: one invalid
// or missing envelope fails the batch, unsent, and names its index; a
// missing envelope is an error, not a panic, for PublishEnvelope too.
func TestPublishBatchValidatesFirst(t *testing.T) {
	for name, bad := range map[string]*core.Envelope{
		"invalid": {URN: " "},
		"nil":     nil,
	} {
		t.Run(name, func(t *testing.T) {
			b := memqueue.New()
			p := queue.NewPublisher(b.Sender())
			batch := make([]queue.Outgoing, 500)
			for i := range batch {
				env, err := core.New(urn, map[string]int{"n": i}, core.WithQueue("q"))
				if err != nil {
					t.Fatal(err)
				}
				batch[i] = queue.Outgoing{Envelope: env}
			}
			batch[400].Envelope = bad
			err := p.PublishBatch(context.Background(), batch)
			if err == nil || !strings.Contains(err.Error(), "batch message 400") {
				t.Fatalf("PublishBatch = %v, want the error of message 400", err)
			}
			if n := b.Len("q"); n != 0 {
				t.Fatalf("%d messages sent before failing", n)
			}
			if err := p.PublishEnvelope(context.Background(), bad); err == nil {
				t.Fatal("PublishEnvelope of a bad envelope succeeded")
			}
			if name == "nil" {
				if err := p.Redrive(context.Background(), nil); err == nil {
					t.Fatal("Redrive of no envelope succeeded")
				}
			}
		})
	}
}
