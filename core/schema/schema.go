// Package schema validates an envelope's data against a per-URN payload
// schema: the JSON Schema draft-07 subset of the BabelQueue contract (type,
// required, properties, additionalProperties, items, enum, const, minLength
// in Unicode code points, minimum). Validation is opt-in: a URN without a
// registered schema is not checked.
//
// It is built on github.com/santhosh-tekuri/jsonschema/v6, which decodes
// numbers exactly, so integers beyond 2^53 are compared without rounding.
package schema

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/babelqueue/transports/core/queue"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrInvalidPayload is wrapped by every validation failure; test with errors.Is.
var ErrInvalidPayload = errors.New("babelqueue: payload does not match its schema")

// ValidationError reports data that does not match the schema of its URN.
type ValidationError struct {
	URN string
	// Cause is the validator's detailed report.
	Cause error
}

// Error implements error.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("babelqueue: payload of %s does not match its schema: %v", e.URN, e.Cause)
}

// Unwrap returns ErrInvalidPayload and the detailed cause.
func (e *ValidationError) Unwrap() []error { return []error{ErrInvalidPayload, e.Cause} }

// Schema is one compiled payload schema.
type Schema struct{ s *jsonschema.Schema }

// Compile compiles a draft-07 schema document. Remote references are not
// fetched.
func Compile(doc []byte) (*Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("babelqueue: parsing payload schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(noLoader{})
	const loc = "mem:///payload.schema.json"
	if err := c.AddResource(loc, v); err != nil {
		return nil, fmt.Errorf("babelqueue: loading payload schema: %w", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("babelqueue: compiling payload schema: %w", err)
	}
	return &Schema{s: s}, nil
}

// Validate checks the raw JSON data against the schema.
func (s *Schema) Validate(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: data is not JSON: %v", ErrInvalidPayload, err)
	}
	if err := s.s.Validate(v); err != nil {
		return err
	}
	return nil
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("babelqueue: payload schema references %s; remote references are not loaded", url)
}

// Registry maps URNs to schemas. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	schemas map[string]*Schema
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{schemas: map[string]*Schema{}} }

// Register compiles doc and registers it for urn, replacing any earlier one.
func (r *Registry) Register(urn string, doc []byte) error {
	s, err := Compile(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", urn, err)
	}
	r.mu.Lock()
	r.schemas[urn] = s
	r.mu.Unlock()
	return nil
}

// Validate checks data against the schema of urn. It returns nil when no
// schema is registered for urn, and a *ValidationError when data does not
// conform.
func (r *Registry) Validate(urn string, data []byte) error {
	r.mu.RLock()
	s := r.schemas[urn]
	r.mu.RUnlock()
	if s == nil {
		return nil
	}
	if err := s.Validate(data); err != nil {
		return &ValidationError{URN: urn, Cause: err}
	}
	return nil
}

// Middleware validates each message's data against the schema registered for
// its URN before the handler runs. A message that does not conform fails
// permanently (queue.Permanent): retrying cannot fix it, so it goes to the
// dead-letter destination at once.
func Middleware(r *Registry) queue.Middleware {
	return func(next queue.HandlerFunc) queue.HandlerFunc {
		return func(ctx context.Context, m *queue.Message) error {
			if err := r.Validate(m.Envelope.URN, m.Envelope.Data()); err != nil {
				return queue.Permanent(err)
			}
			return next(ctx, m)
		}
	}
}
