package azureservicebus

import (
	"testing"
	"time"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// TestConformance runs the asb block of the suite named by
// BQ_CONFORMANCE_DIR, or of the project's embedded suite: every gate case at
// every integer width that holds it, and floats as float32 and float64.
func TestConformance(t *testing.T) {
	s := conformance.FromEnv(t)
	s.RunASB(t, conformance.ASBBinding{
		Project: func(fixture []byte) (conformance.ASBMessage, map[string]any, []byte, error) {
			env, err := core.Decode(fixture)
			if err != nil {
				return conformance.ASBMessage{}, nil, nil, err
			}
			body, err := env.Encode()
			if err != nil {
				return conformance.ASBMessage{}, nil, nil, err
			}
			m := Project(&driver.Message{Envelope: env, Body: body, Queue: env.Meta.Queue}, time.Now())
			return conformance.ASBMessage{
				Subject: *m.Subject, CorrelationID: *m.CorrelationID, MessageID: *m.MessageID, ContentType: *m.ContentType,
			}, m.ApplicationProperties, m.Body, nil
		},
		Reconcile: Attempts,
		Gate:      func(v any, present bool) bool { return Gate(v, present) == nil },
	})
}
