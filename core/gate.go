package core

// CheckSchemaVersion applies the consumer-side schema-version gate to the
// native bq-schema-version header, before the body is decoded. An absent or
// blank value (empty, or only ASCII space, \t, \n, \v, \f, \r) passes; any
// other value passes only if it is exactly "1", never trimmed. A rejection
// returns ErrSchemaVersionGate wrapped in a *DecodeError; the message is poison.
func CheckSchemaVersion(value string, present bool) error {
	if !present || value == "1" || asciiBlank(value) {
		return nil
	}
	return &DecodeError{Pointer: "bq-schema-version", Detail: strconvQuote(value), Err: ErrSchemaVersionGate}
}

func asciiBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			return false
		}
	}
	return true
}

func strconvQuote(s string) string { return string(appendString(nil, s)) }

// NativeAttempts is a broker's own view of how often a message was delivered
// before, already mapped to the 0-based attempts scale.
type NativeAttempts struct {
	// Count is the 0-based number of earlier deliveries the broker reports.
	Count int
	// Known is false when the broker gave no usable count (absent, garbage).
	Known bool
	// Authoritative makes Count replace the body's attempts even when lower
	// (Kafka's bq-attempts header); otherwise the larger of the two wins.
	Authoritative bool
}

// Reconcile combines the body's attempts with the native count.
func (n NativeAttempts) Reconcile(body int) int {
	switch {
	case !n.Known:
		return body
	case n.Authoritative:
		return n.Count
	case n.Count > body:
		return n.Count
	default:
		return body
	}
}
