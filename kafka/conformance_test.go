package kafka

import (
	"testing"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// TestConformance runs the kafka block of the suite named by
// BQ_CONFORMANCE_DIR, or of the project's embedded suite.
func TestConformance(t *testing.T) {
	s := conformance.FromEnv(t)
	s.RunKafka(t, conformance.KafkaBinding{
		Project: func(fixture []byte) (map[string]string, []byte, int64, error) {
			env, err := core.Decode(fixture)
			if err != nil {
				return nil, nil, 0, err
			}
			body, err := env.Encode()
			if err != nil {
				return nil, nil, 0, err
			}
			rec := Project(&driver.Message{Envelope: env, Body: body, Queue: env.Meta.Queue}, env.Meta.Queue, nil)
			headers := map[string]string{}
			for _, h := range rec.Headers {
				headers[h.Key] = string(h.Value)
			}
			return headers, rec.Value, rec.Timestamp.UnixMilli(), nil
		},
		Reconcile: func(body int, h *string) int {
			if h == nil {
				return Attempts(body, "", false)
			}
			return Attempts(body, *h, true)
		},
		Gate: func(v string, present bool) bool { return Gate(v, present) == nil },
	})
}
