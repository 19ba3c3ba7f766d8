package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Message is what a handler receives: the decoded envelope (attempts already
// reconciled with the broker's delivery count) and its delivery context.
type Message struct {
	Envelope *core.Envelope
	// Queue is the queue or topic the message was consumed from.
	Queue string
	// Headers are the native headers, including extra transport headers
	// such as traceparent. Retry and dead-letter copies carry its extra
	// (non-"bq-") headers as the handler chain leaves them: a middleware may
	// replace the map to change what the copies carry (the OpenTelemetry
	// middleware points their traceparent at its consumer span). Replace it,
	// never write into it: it is the delivery's own.
	Headers map[string]string
	// Delivery is the driver's delivery, for drivers' own middleware.
	Delivery *driver.Delivery
}

// HandlerFunc handles one message. A nil error acknowledges it; an error
// retries it until max attempts, then dead-letters it.
type HandlerFunc func(ctx context.Context, m *Message) error

// Middleware wraps a handler.
type Middleware func(HandlerFunc) HandlerFunc

// Chain applies mws so that the first is outermost.
func Chain(h HandlerFunc, mws ...Middleware) HandlerFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// PanicError is the error a recovered handler panic becomes.
type PanicError struct {
	Value any
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("babelqueue: handler panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// callSafely runs h, turning a panic into a *PanicError.
func callSafely(ctx context.Context, h HandlerFunc, m *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h(ctx, m)
}

// ErrUnknownURN is the handler error of a message with no registered
// handler under the UnknownFail strategy.
var ErrUnknownURN = errors.New("babelqueue: no handler registered for URN")

// ErrSkip, returned by a handler (or wrapped in its error), acknowledges the
// message without handling it, with outcome OutcomeSkipped: a duplicate the
// idempotency middleware recognised, say. It spends no attempt.
var ErrSkip = errors.New("babelqueue: message skipped")

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

// Error implements error.
func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the message is dead-lettered
// (reason "failed") at once, or dropped when dead-lettering is off.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
