package core_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/idempotency"
	"github.com/babelqueue/transports/core/schema"
)

// coreAdapter binds this module to the conformance runner.
var coreAdapter = conformance.Core{
	Decode: func(body []byte, warn func(string)) (conformance.Decoded, error) {
		e, err := core.Decode(body, core.WithWarnFunc(func(w core.Warning) { warn(w.Pointer) }))
		if err != nil {
			return conformance.Decoded{}, err
		}
		d := conformance.Decoded{
			URN: e.URN, Data: e.Data(), Attempts: e.Attempts, Lang: e.Meta.Lang,
			SchemaVersion: e.Meta.SchemaVersion,
			Reencode:      func(n int) ([]byte, error) { return e.WithAttempts(n).Encode() },
		}
		if dl := e.DeadLetter; dl != nil {
			d.HasDeadLetter, d.DeadLetterReason, d.DeadLetterQueue = true, string(dl.Reason), dl.OriginalQueue
		}
		return d, nil
	},
	New: func(urn, queue string, data json.RawMessage) ([]byte, error) {
		e, err := core.New(urn, data, core.WithQueue(queue))
		if err != nil {
			return nil, err
		}
		return e.Encode()
	},
	ValidatePayload: func(doc, data json.RawMessage) (bool, error) {
		s, err := schema.Compile(doc)
		if err != nil {
			return false, err
		}
		return s.Validate(data) == nil, nil
	},
	Idempotent: func(handler func() error) (func(string) error, func(string) error) {
		store := idempotency.NewMemoryStore()
		ctx := context.Background()
		deliver := func(id string) error {
			_, err := idempotency.Do(ctx, store, id, func(context.Context) error { return handler() })
			return err
		}
		return deliver, func(id string) error { return store.Forget(ctx, id) }
	},
	DedupKey: func(body []byte) (string, error) {
		e, err := core.Decode(body)
		if err != nil {
			return "", err
		}
		return e.Meta.ID, nil
	},
}

// TestConformance runs every broker-free block of the suite named by
// BQ_CONFORMANCE_DIR, or of the project's embedded suite.
func TestConformance(t *testing.T) {
	s := conformance.FromEnv(t)
	s.RunCore(t, coreAdapter)
	s.ReportNotShipped(t, "artemis", "redis", "rabbitmq")
}

// TestProducerOutputMatchesEnvelopeSchema validates what New+Encode writes
// against the suite's producer JSON Schema.
func TestProducerOutputMatchesEnvelopeSchema(t *testing.T) {
	s := conformance.FromEnv(t)
	doc, err := s.Fixture("schema/message-envelope.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	sch, err := schema.Compile(doc)
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New("urn:babel:orders:created", map[string]any{"order_id": 1}, core.WithQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []*core.Envelope{e, e.WithAttempts(2), e.DeadLettered(core.NewDeadLetter(core.ReasonFailed, context.Canceled, "orders", 3, fixedTime))} {
		out, err := env.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(out); err != nil {
			t.Errorf("producer output %s fails the envelope schema: %v", out, err)
		}
	}
}
