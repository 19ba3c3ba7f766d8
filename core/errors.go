package core

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped in a *DecodeError) by Decode and Validate.
// Test for them with errors.Is.
var (
	// ErrMalformed reports a body that is not a well-formed JSON object.
	ErrMalformed = errors.New("babelqueue: malformed envelope JSON")
	// ErrNoURN reports an envelope with neither "job" nor "urn", or a blank one.
	ErrNoURN = errors.New("babelqueue: envelope has no URN (job)")
	// ErrMetaNotObject reports a missing "meta" or one that is not a JSON object.
	ErrMetaNotObject = errors.New("babelqueue: meta is not an object")
	// ErrSchemaVersion reports a meta.schema_version other than the integer 1.
	ErrSchemaVersion = errors.New("babelqueue: unsupported schema_version")
	// ErrDataNotObject reports a missing "data" or one that is not a JSON object.
	ErrDataNotObject = errors.New("babelqueue: data is not an object")
	// ErrAttempts reports an "attempts" value that is not a non-negative integer.
	ErrAttempts = errors.New("babelqueue: attempts is not a non-negative integer")
	// ErrBlankTraceID reports a missing, empty or whitespace-only trace_id.
	ErrBlankTraceID = errors.New("babelqueue: trace_id is blank")
	// ErrFieldType reports a known field carrying the wrong JSON type.
	ErrFieldType = errors.New("babelqueue: field has the wrong JSON type")
	// ErrSchemaVersionGate reports a native bq-schema-version header that is
	// present, not blank, and not exactly "1": the body must not be decoded.
	ErrSchemaVersionGate = errors.New("babelqueue: bq-schema-version gate rejected the message")
)

// DecodeError describes why an envelope was rejected. Pointer is the RFC 6901
// JSON pointer of the offending field ("" for the whole document). It unwraps
// to one of the sentinel errors of this package.
type DecodeError struct {
	Pointer string
	Detail  string
	Err     error
}

// Error implements error.
func (e *DecodeError) Error() string {
	msg := e.Err.Error()
	if e.Pointer != "" {
		msg += " at " + e.Pointer
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the sentinel error.
func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(sentinel error, pointer, format string, args ...any) error {
	d := ""
	if format != "" {
		d = fmt.Sprintf(format, args...)
	}
	return &DecodeError{Pointer: pointer, Detail: d, Err: sentinel}
}
