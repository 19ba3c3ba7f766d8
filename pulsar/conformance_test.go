package pulsar

import (
	"testing"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// TestConformance runs the pulsar block of the suite named by
// BQ_CONFORMANCE_DIR, or of the project's embedded suite.
func TestConformance(t *testing.T) {
	s := conformance.FromEnv(t)
	s.RunPulsar(t, conformance.PulsarBinding{
		Project: func(fixture []byte) (map[string]string, []byte, error) {
			env, err := core.Decode(fixture)
			if err != nil {
				return nil, nil, err
			}
			body, err := env.Encode()
			if err != nil {
				return nil, nil, err
			}
			pm := ProducerMessage(&driver.Message{Envelope: env, Body: body, Queue: env.Meta.Queue})
			return pm.Properties, pm.Payload, nil
		},
		Reconcile: Attempts,
		Gate:      func(v string, present bool) bool { return Gate(v, present) == nil },
	})
}
