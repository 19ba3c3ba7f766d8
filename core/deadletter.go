package core

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Reason says why a message was dead-lettered.
type Reason string

// The dead-letter reasons of the contract.
const (
	ReasonFailed     Reason = "failed"      // the handler failed max-attempts times
	ReasonUnknownURN Reason = "unknown_urn" // no handler is registered for the URN
	ReasonPoison     Reason = "poison"      // undecodable, no URN, or gate-rejected
)

// DeadLetter is the additive block a dead-lettered copy carries.
type DeadLetter struct {
	Reason Reason
	// Error is the failure's message; "" encodes as null.
	Error string
	// Exception is the failure's type name (%T in Go); "" encodes as null.
	Exception string
	// FailedAt is Unix epoch milliseconds.
	FailedAt      int64
	OriginalQueue string
	Attempts      int
	Lang          string

	extra []member
}

// NewDeadLetter builds the block for a failure: Exception is the %T of the
// first error in err's chain that is not a plain fmt.Errorf or errors.Join
// wrapper, Lang is "go".
func NewDeadLetter(reason Reason, err error, originalQueue string, attempts int, at time.Time) DeadLetter {
	dl := DeadLetter{
		Reason:        reason,
		FailedAt:      at.UnixMilli(),
		OriginalQueue: originalQueue,
		Attempts:      attempts,
		Lang:          Lang,
	}
	if err != nil {
		dl.Error = TruncateError(err.Error(), MaxDeadLetterError)
		dl.Exception = errorType(err)
	}
	return dl
}

// MaxDeadLetterError bounds dead_letter.error in bytes, so that a huge
// handler error cannot push a dead-letter copy past the broker's message
// size limit.
const MaxDeadLetterError = 4096

// TruncateError returns s cut to at most max bytes at a UTF-8 boundary, with
// a marker saying how long it was; s itself when it fits.
func TruncateError(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf(" …[truncated, %d bytes]", len(s))
	cut := max - len(marker)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}

func errorType(err error) string {
	for {
		t := fmt.Sprintf("%T", err)
		if t != "*fmt.wrapError" && t != "*fmt.wrapErrors" {
			return t
		}
		next := errors.Unwrap(err)
		if next == nil {
			return t
		}
		err = next
	}
}

// DeadLettered returns a copy of e carrying dl. Every other field, unknown keys
// included, is unchanged.
func (e *Envelope) DeadLettered(dl DeadLetter) *Envelope {
	c := e.clone()
	if dl.Lang == "" {
		dl.Lang = Lang
	}
	c.DeadLetter = &dl
	return c
}

// Redrive returns a copy of a dead-lettered envelope ready to be sent back:
// the dead_letter block removed, attempts reset to 0, everything else kept.
// queue is where it goes: dead_letter.original_queue, else meta.queue.
func (e *Envelope) Redrive() (c *Envelope, queue string) {
	queue = e.Meta.Queue
	if e.DeadLetter != nil && e.DeadLetter.OriginalQueue != "" {
		queue = e.DeadLetter.OriginalQueue
	}
	c = e.clone()
	c.DeadLetter = nil
	c.Attempts = 0
	return c, queue
}

func (d *DeadLetter) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"reason":`...)
	dst = appendString(dst, string(d.Reason))
	dst = append(dst, `,"error":`...)
	dst = appendNullable(dst, d.Error)
	dst = append(dst, `,"exception":`...)
	dst = appendNullable(dst, d.Exception)
	dst = append(dst, `,"failed_at":`...)
	dst = strconv.AppendInt(dst, d.FailedAt, 10)
	dst = append(dst, `,"original_queue":`...)
	dst = appendString(dst, d.OriginalQueue)
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(d.Attempts), 10)
	dst = append(dst, `,"lang":`...)
	dst = appendString(dst, d.Lang)
	dst = appendMembers(dst, d.extra)
	return append(dst, '}')
}

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendString(dst, s)
}

// decodeDeadLetter reads the dead_letter object b into d; plain is
// fieldString's.
func decodeDeadLetter(d *DeadLetter, b []byte, plain bool) error {
	var stack [inlineExtras]member
	extras := stack[:0]
	var spanBuf [inlineSpans]span
	spans := objectSpans(b, 0, spanBuf[:0])
	spans = classify(b, spans, deadLetterClass)
	for i := range spans {
		sp := &spans[i]
		val := b[sp.vs:sp.ve]
		var err error
		switch sp.class {
		case classReason:
			var s string
			err = optionalString("/dead_letter/reason", val, plain, &s)
			d.Reason = Reason(s)
		case classError:
			err = optionalString("/dead_letter/error", val, plain, &d.Error)
		case classException:
			err = optionalString("/dead_letter/exception", val, plain, &d.Exception)
		case classOriginalQueue:
			err = optionalString("/dead_letter/original_queue", val, plain, &d.OriginalQueue)
		case classDLLang:
			err = optionalString("/dead_letter/lang", val, plain, &d.Lang)
		case classFailedAt:
			n, ok := parseUint(val)
			if !ok {
				return decodeErr(ErrFieldType, "/dead_letter/failed_at", "got %s", val)
			}
			d.FailedAt = n
		case classDLAttempts:
			n, ok := parseCount(val)
			if !ok {
				return decodeErr(ErrFieldType, "/dead_letter/attempts", "got %s", val)
			}
			d.Attempts = n
		default:
			extras = append(extras, memberAt(b, sp))
		}
		if err != nil {
			return err
		}
	}
	d.extra = keep(extras)
	return nil
}

// The classes of the contract keys of dead_letter (see classify).
const (
	classReason uint8 = 1 + iota
	classError
	classException
	classOriginalQueue
	classDLLang
	classFailedAt
	classDLAttempts
)

func deadLetterClass(k []byte) uint8 {
	switch string(k) {
	case "reason":
		return classReason
	case "error":
		return classError
	case "exception":
		return classException
	case "original_queue":
		return classOriginalQueue
	case "lang":
		return classDLLang
	case "failed_at":
		return classFailedAt
	case "attempts":
		return classDLAttempts
	}
	return 0
}

// PointerData describes where a message is that was too large to copy into
// a dead-letter destination. It is the data of the stand-in copy published
// instead, under the key "bq_oversized".
type PointerData struct {
	// Queue is the queue or topic the original was consumed from.
	Queue string
	// ID is the original's meta.id (or its bq-message-id header).
	ID string
	// Position is the broker's position or message id of the original.
	Position string
	// Bytes is the original body's size.
	Bytes int
}

func (p PointerData) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"bq_oversized":{"queue":`...)
	dst = appendString(dst, p.Queue)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, p.ID)
	dst = append(dst, `,"position":`...)
	dst = appendString(dst, p.Position)
	dst = append(dst, `,"bytes":`...)
	dst = strconv.AppendInt(dst, int64(p.Bytes), 10)
	return append(dst, "}}"...)
}

// MarshalPointer encodes p as the JSON object a stand-in copy carries.
func MarshalPointer(p PointerData) ([]byte, error) { return p.appendJSON(nil), nil }

// Pointer returns a small stand-in for e: the same job, trace_id and meta
// contract fields, attempts and dead_letter, with data replaced by p and no
// unknown keys. It is what a dead-letter destination receives when even the
// original body does not fit there.
func (e *Envelope) Pointer(p PointerData) *Envelope {
	c := e.clone()
	c.data = p.appendJSON(nil)
	c.extra = nil
	c.Meta.extra = nil
	if c.DeadLetter != nil {
		c.DeadLetter.extra = nil
	}
	return c
}
