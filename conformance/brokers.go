package conformance

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strconv"
	"testing"
)

// StringGate is the schema-version gate of a binding whose header values are
// strings: it reports whether the message may be decoded.
type StringGate func(value string, present bool) bool

// SQSBinding adapts an SQS transport.
type SQSBinding struct {
	// Project runs the produce-side projection of an envelope and returns the
	// native message attributes and body.
	Project func(envelope []byte) (attrs map[string]SQSAttribute, body []byte, err error)
	// Reconcile returns the consume-side attempts; count is nil when the
	// ApproximateReceiveCount attribute is absent.
	Reconcile func(bodyAttempts int, count *string) int
	Gate      StringGate
}

// KafkaBinding adapts a Kafka transport.
type KafkaBinding struct {
	Project   func(envelope []byte) (headers map[string]string, value []byte, timestampMs int64, err error)
	Reconcile func(bodyAttempts int, header *string) int
	Gate      StringGate
}

// PulsarBinding adapts a Pulsar transport.
type PulsarBinding struct {
	Project   func(envelope []byte) (props map[string]string, payload []byte, err error)
	Reconcile func(bodyAttempts int, redeliveryCount uint32) int
	Gate      StringGate
}

// ASBBinding adapts an Azure Service Bus transport.
type ASBBinding struct {
	Project func(envelope []byte) (msg ASBMessage, props map[string]any, body []byte, err error)
	// Reconcile receives the 1-based native DeliveryCount.
	Reconcile func(bodyAttempts int, deliveryCount uint32) int
	// Gate receives the application property as the AMQP-decoded Go value
	// (string, a sized integer, a float, or nil).
	Gate func(value any, present bool) bool
}

// RunSQS runs the sqs block.
func (s *Suite) RunSQS(t *testing.T, b SQSBinding) {
	blk := need(t, s, "sqs", s.Manifest.SQS)
	t.Run("attribute_projection", func(t *testing.T) {
		p := blk.AttributeProjection
		env := s.mustFixture(t, p.EnvelopeFile)
		attrs, body, err := b.Project(env)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(attrs, p.MessageAttributes) {
			t.Errorf("attributes = %v, want %v", attrs, p.MessageAttributes)
		}
		sameEnvelope(t, body, env)
	})
	t.Run("attempts_reconciliation", func(t *testing.T) {
		for _, c := range blk.AttemptsReconciliation.Cases {
			if got := b.Reconcile(c.BodyAttempts, c.ApproximateReceiveCount); got != c.ExpectedAttempts {
				t.Errorf("%s: attempts = %d, want %d", c.Name, got, c.ExpectedAttempts)
			}
		}
	})
	t.Run("schema_version_gate", func(t *testing.T) {
		runStringGate(t, need(t, s, "sqs.schema_version_gate", blk.SchemaVersionGate), b.Gate)
	})
}

// RunKafka runs the kafka block.
func (s *Suite) RunKafka(t *testing.T, b KafkaBinding) {
	blk := need(t, s, "kafka", s.Manifest.Kafka)
	t.Run("property_projection", func(t *testing.T) {
		p := blk.PropertyProjection
		env := s.mustFixture(t, p.EnvelopeFile)
		headers, value, ts, err := b.Project(env)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(headers, p.Headers) {
			t.Errorf("headers = %v, want %v", headers, p.Headers)
		}
		sameEnvelope(t, value, env)
		created, _ := Pointer(env, "/meta/created_at")
		if strconv.FormatInt(ts, 10) != string(created) {
			t.Errorf("record timestamp = %d, want meta.created_at %s", ts, created)
		}
	})
	t.Run("attempts_reconciliation", func(t *testing.T) {
		for _, c := range blk.AttemptsReconciliation.Cases {
			var h *string
			if c.HeaderAttempts != nil {
				v := strconv.Itoa(*c.HeaderAttempts)
				h = &v
			}
			if got := b.Reconcile(c.BodyAttempts, h); got != c.ExpectedAttempts {
				t.Errorf("%s: attempts = %d, want %d", c.Name, got, c.ExpectedAttempts)
			}
		}
	})
	t.Run("schema_version_gate", func(t *testing.T) {
		runStringGate(t, need(t, s, "kafka.schema_version_gate", blk.SchemaVersionGate), b.Gate)
	})
}

// RunPulsar runs the pulsar block.
func (s *Suite) RunPulsar(t *testing.T, b PulsarBinding) {
	blk := need(t, s, "pulsar", s.Manifest.Pulsar)
	t.Run("property_projection", func(t *testing.T) {
		p := blk.PropertyProjection
		env := s.mustFixture(t, p.EnvelopeFile)
		props, payload, err := b.Project(env)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(props, p.Properties) {
			t.Errorf("properties = %v, want %v", props, p.Properties)
		}
		sameEnvelope(t, payload, env)
	})
	t.Run("attempts_reconciliation", func(t *testing.T) {
		for _, c := range blk.AttemptsReconciliation.Cases {
			if got := b.Reconcile(c.BodyAttempts, uint32(c.RedeliveryCount)); got != c.ExpectedAttempts {
				t.Errorf("%s: attempts = %d, want %d", c.Name, got, c.ExpectedAttempts)
			}
		}
	})
	t.Run("schema_version_gate", func(t *testing.T) {
		runStringGate(t, need(t, s, "pulsar.schema_version_gate", blk.SchemaVersionGate), b.Gate)
	})
}

// RunASB runs the asb block. Every integral gate value is tried at int32 and
// int64 width (and unsigned widths when non-negative); a value_type "float"
// case is tried as float64 and float32.
func (s *Suite) RunASB(t *testing.T, b ASBBinding) {
	blk := need(t, s, "asb", s.Manifest.ASB)
	t.Run("property_projection", func(t *testing.T) {
		p := blk.PropertyProjection
		env := s.mustFixture(t, p.EnvelopeFile)
		msg, props, body, err := b.Project(env)
		if err != nil {
			t.Fatal(err)
		}
		if msg != p.Message {
			t.Errorf("message = %+v, want %+v", msg, p.Message)
		}
		if len(props) != len(p.ApplicationProperties) {
			t.Errorf("application properties = %v, want exactly %d", props, len(p.ApplicationProperties))
		}
		for k, want := range p.ApplicationProperties {
			if err := sameAMQP(props[k], want); err != nil {
				t.Errorf("application property %s: %v", k, err)
			}
		}
		sameEnvelope(t, body, env)
	})
	t.Run("attempts_reconciliation", func(t *testing.T) {
		for _, c := range blk.AttemptsReconciliation.Cases {
			if got := b.Reconcile(c.BodyAttempts, uint32(c.DeliveryCount)); got != c.ExpectedAttempts {
				t.Errorf("%s: attempts = %d, want %d", c.Name, got, c.ExpectedAttempts)
			}
		}
	})
	t.Run("schema_version_gate", func(t *testing.T) {
		g := need(t, s, "asb.schema_version_gate", blk.SchemaVersionGate)
		for i, c := range g.Cases {
			want := c.Expect == "decode"
			for _, v := range asbValues(c) {
				got := b.Gate(v.value, v.present)
				if got != want {
					t.Errorf("case %d: %T(%v) present=%v: decode=%v, want %v", i, v.value, v.value, v.present, got, want)
				}
			}
		}
	})
}

type gateValue struct {
	value   any
	present bool
}

func asbValues(c GateCase) []gateValue {
	if c.Absent {
		return []gateValue{{nil, false}}
	}
	raw := c.Value
	if len(raw) == 0 || string(raw) == "null" {
		return []gateValue{{nil, true}}
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return []gateValue{{s, true}}
	}
	f, _ := strconv.ParseFloat(string(raw), 64)
	if c.ValueType == "float" || f != math.Trunc(f) {
		return []gateValue{{f, true}, {float32(f), true}}
	}
	// Every integer width that holds the value exactly.
	n := int64(f)
	vs := []gateValue{{n, true}}
	if n == int64(int32(n)) {
		vs = append(vs, gateValue{int32(n), true})
	}
	if n == int64(int16(n)) {
		vs = append(vs, gateValue{int16(n), true})
	}
	if n == int64(int8(n)) {
		vs = append(vs, gateValue{int8(n), true})
	}
	if n >= 0 {
		vs = append(vs, gateValue{uint64(n), true})
		if n <= math.MaxUint32 {
			vs = append(vs, gateValue{uint32(n), true})
		}
		if n <= math.MaxUint16 {
			vs = append(vs, gateValue{uint16(n), true})
		}
		if n <= math.MaxUint8 {
			vs = append(vs, gateValue{uint8(n), true})
		}
	}
	return vs
}

func runStringGate(t *testing.T, g *GateBlock, gate StringGate) {
	for i, c := range g.Cases {
		value, present := "", !c.Absent
		if present {
			if err := json.Unmarshal(c.Value, &value); err != nil {
				t.Fatalf("case %d: %s value %s is not a string", i, g.Property, c.Value)
			}
		}
		want := c.Expect == "decode"
		if got := gate(value, present); got != want {
			t.Errorf("case %d: %s=%q present=%v: decode=%v, want %v", i, g.Property, value, present, got, want)
		}
	}
}

// sameEnvelope checks that the native body is the envelope (same JSON).
func sameEnvelope(t *testing.T, body, fixture []byte) {
	t.Helper()
	if eq, err := JSONEqual(body, fixture); err != nil || !eq {
		t.Errorf("native body %s is not the envelope %s (%v)", body, fixture, err)
	}
}

// sameAMQP compares a native AMQP-typed value with the expected JSON value:
// JSON numbers must arrive as Go integers, strings as strings.
func sameAMQP(got any, want json.RawMessage) error {
	if len(want) > 0 && want[0] == '"' {
		var s string
		_ = json.Unmarshal(want, &s)
		if g, ok := got.(string); !ok || g != s {
			return fmt.Errorf("got %T(%v), want string %q", got, got, s)
		}
		return nil
	}
	w, err := strconv.ParseInt(string(want), 10, 64)
	if err != nil {
		return fmt.Errorf("unsupported expected value %s", want)
	}
	var g int64
	switch v := got.(type) {
	case int:
		g = int64(v)
	case int32:
		g = int64(v)
	case int64:
		g = v
	default:
		return fmt.Errorf("got %T(%v), want an integer %d", got, got, w)
	}
	if g != w {
		return fmt.Errorf("got %d, want %d", g, w)
	}
	return nil
}
