package pulsar

import (
	"fmt"

	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// DiscardedMessage describes a message that pulsar-client-go discarded
// before it reached the Receiver: a batch it could not deserialize, a
// checksum mismatch, a failed decryption or decompression. The client acknowledges such a
// message with a validation error, so it cannot be quarantined; it can only
// be reported.
type DiscardedMessage struct {
	// Fields are the client's log fields: msgID and validationError.
	Fields map[string]any
}

// Error implements error, for an error handler.
func (d DiscardedMessage) Error() string {
	return fmt.Sprintf("babelqueue/pulsar: pulsar-client-go discarded a corrupted message (%v, %v)",
		d.Fields["msgID"], d.Fields["validationError"])
}

// WatchDiscards wraps the pulsar client's logger (pulsar.ClientOptions.Logger;
// nil for none) so that every message the client discards as corrupted is
// reported to onDiscard, for the error handler and metrics, besides being
// logged as before:
//
//	client, _ := pulsar.NewClient(pulsar.ClientOptions{URL: url,
//		Logger: bqpulsar.WatchDiscards(nil, func(d bqpulsar.DiscardedMessage) { errs <- d })})
func WatchDiscards(next plog.Logger, onDiscard func(DiscardedMessage)) plog.Logger {
	if next == nil {
		next = plog.DefaultNopLogger()
	}
	return &discardLogger{next: next, on: onDiscard}
}

// discardMessage is the text pulsar-client-go logs when it discards one.
const discardMessage = "Discarding corrupted message"

type discardLogger struct {
	next plog.Logger
	on   func(DiscardedMessage)
}

func (l *discardLogger) SubLogger(f plog.Fields) plog.Logger {
	return &discardLogger{next: l.next.SubLogger(f), on: l.on}
}
func (l *discardLogger) WithFields(f plog.Fields) plog.Entry {
	return &discardEntry{next: l.next.WithFields(f), on: l.on, fields: copyFields(nil, f)}
}
func (l *discardLogger) WithField(k string, v any) plog.Entry {
	return &discardEntry{next: l.next.WithField(k, v), on: l.on, fields: map[string]any{k: v}}
}
func (l *discardLogger) WithError(err error) plog.Entry {
	return &discardEntry{next: l.next.WithError(err), on: l.on, fields: map[string]any{"error": err}}
}
func (l *discardLogger) Debug(a ...any)            { l.next.Debug(a...) }
func (l *discardLogger) Info(a ...any)             { l.next.Info(a...) }
func (l *discardLogger) Warn(a ...any)             { l.next.Warn(a...) }
func (l *discardLogger) Error(a ...any)            { l.check(nil, a); l.next.Error(a...) }
func (l *discardLogger) Debugf(f string, a ...any) { l.next.Debugf(f, a...) }
func (l *discardLogger) Infof(f string, a ...any)  { l.next.Infof(f, a...) }
func (l *discardLogger) Warnf(f string, a ...any)  { l.next.Warnf(f, a...) }
func (l *discardLogger) Errorf(f string, a ...any) { l.next.Errorf(f, a...) }

func (l *discardLogger) check(fields map[string]any, a []any) {
	if l.on != nil && len(a) == 1 && a[0] == discardMessage {
		l.on(DiscardedMessage{Fields: fields})
	}
}

type discardEntry struct {
	next   plog.Entry
	on     func(DiscardedMessage)
	fields map[string]any
}

func (e *discardEntry) WithFields(f plog.Fields) plog.Entry {
	return &discardEntry{next: e.next.WithFields(f), on: e.on, fields: copyFields(e.fields, f)}
}
func (e *discardEntry) WithField(k string, v any) plog.Entry {
	return &discardEntry{next: e.next.WithField(k, v), on: e.on, fields: copyFields(e.fields, plog.Fields{k: v})}
}
func (e *discardEntry) Debug(a ...any) { e.next.Debug(a...) }
func (e *discardEntry) Info(a ...any)  { e.next.Info(a...) }
func (e *discardEntry) Warn(a ...any)  { e.next.Warn(a...) }
func (e *discardEntry) Error(a ...any) {
	if e.on != nil && len(a) == 1 && a[0] == discardMessage {
		e.on(DiscardedMessage{Fields: e.fields})
	}
	e.next.Error(a...)
}
func (e *discardEntry) Debugf(f string, a ...any) { e.next.Debugf(f, a...) }
func (e *discardEntry) Infof(f string, a ...any)  { e.next.Infof(f, a...) }
func (e *discardEntry) Warnf(f string, a ...any)  { e.next.Warnf(f, a...) }
func (e *discardEntry) Errorf(f string, a ...any) { e.next.Errorf(f, a...) }

func copyFields(base map[string]any, f plog.Fields) map[string]any {
	out := make(map[string]any, len(base)+len(f))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range f {
		out[k] = v
	}
	return out
}
