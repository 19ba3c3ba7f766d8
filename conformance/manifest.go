package conformance

import "encoding/json"

// Manifest is the typed form of manifest.json. A nil block is absent.
type Manifest struct {
	SchemaVersion        int                 `json:"schema_version"`
	Description          string              `json:"description"`
	Cases                []Case              `json:"cases"`
	Idempotency          *IdempotencyBlock   `json:"idempotency"`
	SQS                  *SQSBlock           `json:"sqs"`
	ASB                  *ASBBlock           `json:"asb"`
	Pulsar               *PulsarBlock        `json:"pulsar"`
	Kafka                *KafkaBlock         `json:"kafka"`
	PayloadSchema        *PayloadSchemaBlock `json:"payload_schema"`
	PayloadSchemaUnicode *PayloadSchemaBlock `json:"payload_schema_unicode"`
	Roundtrip            *RoundtripBlock     `json:"roundtrip"`
	DataShape            *DataShapeBlock     `json:"data_shape"`
	ForbiddenKeys        *ForbiddenKeysBlock `json:"forbidden_keys"`

	// Unknown lists the top-level blocks this runner does not know.
	Unknown []string `json:"-"`
	// Present records every top-level block of the file.
	Present map[string]bool `json:"-"`
}

// knownBlocks are the manifest keys this runner understands (or, for the
// broker bindings of other SDKs, knows to be out of scope).
var knownBlocks = map[string]bool{
	"schema_version": true, "description": true, "cases": true, "idempotency": true,
	"sqs": true, "asb": true, "pulsar": true, "kafka": true,
	"payload_schema": true, "payload_schema_unicode": true, "roundtrip": true,
	"data_shape": true, "forbidden_keys": true,
	// Bindings of brokers this project ships no transport for: known, and
	// reported by ReportNotShipped.
	"artemis": true, "redis": true, "rabbitmq": true,
}

// Case is one envelope case.
type Case struct {
	Name        string  `json:"name"`
	File        string  `json:"file"`
	Valid       bool    `json:"valid"`
	Description string  `json:"description"`
	Reason      string  `json:"reason"`
	Expect      *Expect `json:"expect"`
}

// Expect is what a consumer must derive from a valid case.
type Expect struct {
	URN           string          `json:"urn"`
	Data          json.RawMessage `json:"data"`
	Attempts      int             `json:"attempts"`
	Lang          string          `json:"lang"`
	SchemaVersion int             `json:"schema_version"`
	DeadLetter    *struct {
		Reason        string `json:"reason"`
		OriginalQueue string `json:"original_queue"`
	} `json:"dead_letter"`
}

// IdempotencyBlock locks the consumer-side dedupe contract.
type IdempotencyBlock struct {
	DedupKey struct {
		EnvelopeFile string `json:"envelope_file"`
		KeyField     string `json:"key_field"`
		ExpectedKey  string `json:"expected_key"`
	} `json:"dedup_key"`
	Sequences struct {
		Cases []IdempotencySequence `json:"cases"`
	} `json:"sequences"`
}

// IdempotencySequence is one ordered list of deliveries to one wrapped handler.
type IdempotencySequence struct {
	Name       string `json:"name"`
	Deliveries []struct {
		MetaID       string `json:"meta_id"`
		ExpectEffect string `json:"expect_effect"` // "run" or "skip"
		Outcome      string `json:"outcome"`       // "ok" or "throw"
		ForgetBefore bool   `json:"forget_before"`
	} `json:"deliveries"`
	ExpectedEffects int `json:"expected_effects"`
}

// GateBlock is a schema_version_gate block.
type GateBlock struct {
	Property string     `json:"property"`
	Fixture  string     `json:"fixture"`
	Cases    []GateCase `json:"cases"`
}

// GateCase is one gate value. Value is the raw JSON: a string for the
// string-typed bindings, a number or null for Azure Service Bus.
type GateCase struct {
	Value     json.RawMessage `json:"value"`
	Absent    bool            `json:"absent"`
	ValueType string          `json:"value_type"`
	Expect    string          `json:"expect"` // "decode" or "reject"
}

// SQSBlock is the Amazon SQS binding block.
type SQSBlock struct {
	AttributeProjection struct {
		EnvelopeFile      string                  `json:"envelope_file"`
		MessageAttributes map[string]SQSAttribute `json:"message_attributes"`
	} `json:"attribute_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name                    string  `json:"name"`
			BodyAttempts            int     `json:"body_attempts"`
			ApproximateReceiveCount *string `json:"approximate_receive_count"`
			ExpectedAttempts        int     `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
	SchemaVersionGate *GateBlock `json:"schema_version_gate"`
}

// SQSAttribute is one SQS message attribute.
type SQSAttribute struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue"`
}

// ASBBlock is the Azure Service Bus binding block.
type ASBBlock struct {
	PropertyProjection struct {
		EnvelopeFile          string                     `json:"envelope_file"`
		Message               ASBMessage                 `json:"message"`
		ApplicationProperties map[string]json.RawMessage `json:"application_properties"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			DeliveryCount    int    `json:"delivery_count"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
	SchemaVersionGate *GateBlock `json:"schema_version_gate"`
}

// ASBMessage holds the native Service Bus message fields of the projection.
type ASBMessage struct {
	Subject       string `json:"subject"`
	CorrelationID string `json:"correlation_id"`
	MessageID     string `json:"message_id"`
	ContentType   string `json:"content_type"`
}

// PulsarBlock is the Apache Pulsar binding block.
type PulsarBlock struct {
	PropertyProjection struct {
		EnvelopeFile string            `json:"envelope_file"`
		Properties   map[string]string `json:"properties"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			RedeliveryCount  int    `json:"redelivery_count"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
	SchemaVersionGate *GateBlock `json:"schema_version_gate"`
}

// KafkaBlock is the Apache Kafka binding block.
type KafkaBlock struct {
	PropertyProjection struct {
		EnvelopeFile string            `json:"envelope_file"`
		Headers      map[string]string `json:"headers"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			HeaderAttempts   *int   `json:"header_attempts"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
	SchemaVersionGate *GateBlock `json:"schema_version_gate"`
}

// PayloadSchemaBlock is a payload_schema or payload_schema_unicode block.
type PayloadSchemaBlock struct {
	Schema json.RawMessage `json:"schema"`
	Cases  []struct {
		Name  string          `json:"name"`
		Valid bool            `json:"valid"`
		Data  json.RawMessage `json:"data"`
	} `json:"cases"`
}

// RoundtripBlock locks that unknown keys survive decode → attempts+1 → encode.
type RoundtripBlock struct {
	Cases []struct {
		Name                string                     `json:"name"`
		File                string                     `json:"file"`
		ExpectAttempts      int                        `json:"expect_attempts"`
		ExpectPreserved     map[string]json.RawMessage `json:"expect_preserved"`
		ProducerSchemaValid *bool                      `json:"producer_schema_valid"`
	} `json:"cases"`
}

// DataShapeBlock locks that data is always an object.
type DataShapeBlock struct {
	Cases []struct {
		Name                  string          `json:"name"`
		Mode                  string          `json:"mode"` // "encode" or "decode"
		URN                   string          `json:"urn"`
		Queue                 string          `json:"queue"`
		Data                  json.RawMessage `json:"data"`
		ExpectEncodedDataJSON string          `json:"expect_encoded_data_json"`
		File                  string          `json:"file"`
		Valid                 bool            `json:"valid"`
		Reason                string          `json:"reason"`
	} `json:"cases"`
}

// ForbiddenKeysBlock locks warn-on-decode, never-emit for non-canonical keys.
type ForbiddenKeysBlock struct {
	Cases []struct {
		Name                      string   `json:"name"`
		File                      string   `json:"file"`
		ForbiddenKey              string   `json:"forbidden_key"`
		Expect                    string   `json:"expect"`
		ExpectAbsentAfterReencode []string `json:"expect_absent_after_reencode"`
	} `json:"cases"`
}
