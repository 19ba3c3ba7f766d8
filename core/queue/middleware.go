package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Logging logs every handled message at level Debug and every failure at
// level Warn, with URN, id, attempts and duration.
func Logging(l *slog.Logger) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, m *Message) error {
			start := time.Now()
			err := next(ctx, m)
			attrs := []slog.Attr{
				slog.String("urn", m.Envelope.URN), slog.String("id", m.Envelope.Meta.ID),
				slog.String("queue", m.Queue), slog.Int("attempts", m.Envelope.Attempts),
				slog.Duration("duration", time.Since(start)),
			}
			if err != nil {
				l.LogAttrs(ctx, slog.LevelWarn, "babelqueue: handler failed", append(attrs, slog.Any("error", err))...)
			} else {
				l.LogAttrs(ctx, slog.LevelDebug, "babelqueue: handled", attrs...)
			}
			return err
		}
	}
}

// ErrHandlerTimeout is in the error of a handler that Timeout cut short.
var ErrHandlerTimeout = errors.New("babelqueue: handler timed out")

// Timeout cancels each handler's context d after the handler starts. A
// handler that honours its context then returns, and its error, which
// wraps ErrHandlerTimeout, retries or dead-letters the message as any
// failure does; the attempt counts. A handler that ignores its context runs
// on: Go cannot stop it.
//
// With key-ordered parallelism (Kafka's default) a handler stuck on a
// dependency holds its key's later messages: they fill the driver's
// backlog (driver.Capabilities.Backlog) and then what the consumer holds
// received (twice its batch size), after which every other key waits too,
// or, where the driver takes them back (driver.Capabilities.Defer, as
// Kafka does), the stuck key's partition alone does. With Timeout, a stuck
// handler that honours its context fails instead.
func Timeout(d time.Duration) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, m *Message) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, ErrHandlerTimeout)
			defer cancel()
			err := next(ctx, m)
			if err != nil && context.Cause(ctx) == ErrHandlerTimeout && !errors.Is(err, ErrHandlerTimeout) {
				err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, d, err)
			}
			return err
		}
	}
}

// Recover turns a handler panic into a *PanicError. The consumer already
// does this around every handler; use Recover to catch panics inside an
// inner middleware chain before outer middleware (metrics, tracing) sees
// them.
func Recover() Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, m *Message) error { return callSafely(ctx, next, m) }
	}
}

// StartSpan starts a span for a message and returns the context to run the
// handler in and a function that ends the span with the handler's error.
// An OpenTelemetry adapter implements it with the traceparent header and the
// envelope's trace_id, without core importing OpenTelemetry.
type StartSpan func(ctx context.Context, m *Message) (context.Context, func(err error))

// Tracing runs every handler inside a span from start.
func Tracing(start StartSpan) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, m *Message) error {
			ctx, end := start(ctx, m)
			err := callSafely(ctx, next, m)
			end(err)
			return err
		}
	}
}
