package queue

import (
	"context"
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
