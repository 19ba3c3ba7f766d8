package schema_test

import (
	"context"
	"errors"
	"testing"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/queue"
	"github.com/babelqueue/transports/core/schema"
)

func TestRegistryAndMiddleware(t *testing.T) {
	r := schema.NewRegistry()
	if err := r.Register("urn:a", []byte(`{"type":"object","required":["id"],"properties":{"id":{"type":"integer","minimum":1}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("urn:bad", []byte(`{"$ref":"https://example.com/remote.json"}`)); err == nil {
		t.Error("a remote reference compiled; it must not be fetched")
	}
	if err := r.Validate("urn:a", []byte(`{"id":123456789012345678901234567890}`)); err != nil {
		t.Errorf("big integer rejected: %v", err)
	}
	if err := r.Validate("urn:unregistered", []byte(`{"x":1}`)); err != nil {
		t.Errorf("opt-in: %v", err)
	}
	err := r.Validate("urn:a", []byte(`{"id":0}`))
	var ve *schema.ValidationError
	if !errors.Is(err, schema.ErrInvalidPayload) || !errors.As(err, &ve) || ve.URN != "urn:a" {
		t.Fatalf("err = %v", err)
	}
	e, _ := core.New("urn:a", map[string]any{"id": 0})
	h := schema.Middleware(r)(func(context.Context, *queue.Message) error { t.Error("handler ran"); return nil })
	if err := h(context.Background(), &queue.Message{Envelope: e}); !queue.IsPermanent(err) {
		t.Fatalf("invalid payload must fail permanently, got %v", err)
	}
}
