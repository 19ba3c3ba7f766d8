package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// This file is the settle policy, in one place: what happens to a delivery
// after its handler ran (or could not run). The rules:
//
//   - Nothing is acknowledged before its retry or dead-letter copy was
//     accepted by the broker. A copy that cannot be published leaves the
//     original released for redelivery.
//   - attempts never overflows: it saturates at the largest int, and a
//     message at or past max attempts is dead-lettered after one failure.
//   - A copy too large for the broker is replaced by a smaller one (the
//     original body, then a pointer to the original), never retried in a
//     loop.
//   - The retry delay is the consumer's Backoff, handed to the driver with
//     the release or the copy; each driver honours it natively.

func (c *Consumer) releaseAll(ds []*driver.Delivery) {
	for _, d := range ds {
		c.giveBack(d, nil)
	}
}

// giveBack hands back a delivery whose handler did not run to its end
// (shutdown): through driver.Returner where the driver has it, so that no
// attempt is spent, else as a release without delay.
func (c *Consumer) giveBack(d *driver.Delivery, m *Message) bool {
	r, ok := c.rcv.(driver.Returner)
	if !ok {
		return c.release(d, 0, m)
	}
	ctx, cancel := c.settleCtx()
	err := r.Return(ctx, d)
	cancel()
	if err != nil {
		urn, id := urnOf(m)
		c.report(&SettleError{Op: "release", Queue: d.Queue, URN: urn, MessageID: id, Err: err})
		return false
	}
	return true
}

// settleCtx bounds one settlement (ack, release, copy publish). Settlements
// share a context, renewed when less than half the timeout is left, so that
// each gets between half the settle timeout and all of it without a context
// and a timer per message; the context in use is read without a lock, and
// its age from the monotonic clock alone.
func (c *Consumer) settleCtx() (context.Context, context.CancelFunc) {
	s := &c.settles
	now := time.Since(s.epoch)
	if w := s.cur.Load(); w != nil && w.deadline-now >= c.settleTimeout/2 {
		return w.ctx, noCancel
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.cur.Load()
	if w == nil || w.deadline-now < c.settleTimeout/2 {
		// The context it replaces expires on its own: settlements may
		// still be using it. Its deadline is set after now is read, so
		// the window's is never later than the context's.
		w = &settleWindow{deadline: now + c.settleTimeout}
		w.ctx, w.cancel = context.WithTimeout(context.Background(), c.settleTimeout)
		s.cur.Store(w)
	}
	return w.ctx, noCancel
}

func noCancel() {}

// settleContexts is the shared context of settleCtx.
type settleContexts struct {
	epoch time.Time  // the consumer's creation: deadlines are measured from it
	mu    sync.Mutex // renews cur
	cur   atomic.Pointer[settleWindow]
}

// settleWindow is a shared settlement context and its deadline.
type settleWindow struct {
	ctx      context.Context
	cancel   context.CancelFunc // unused: it expires on its own
	deadline time.Duration      // since settleContexts.epoch
}

// nextAttempt is attempts + 1, saturating at the largest int.
func nextAttempt(n int) int {
	if n >= math.MaxInt {
		return math.MaxInt
	}
	return n + 1
}

// process handles one delivery end to end and settles it; start is when
// its worker took it.
func (c *Consumer) process(ctx context.Context, handlers map[string]HandlerFunc, d *driver.Delivery, start time.Time) {
	if d.Gate != nil {
		c.poison(d, d.Gate, start)
		return
	}
	env, err := c.decoder.Decode(d.Body)
	if err != nil {
		c.poison(d, err, start)
		return
	}
	env.Attempts = d.Native.Reconcile(env.Attempts)
	m := &Message{Envelope: env, Queue: d.Queue, Headers: d.Headers, Delivery: d}

	h, ok := handlers[env.URN]
	if !ok {
		c.unknownURN(m, handlers, start)
		return
	}
	err = callSafely(ctx, h, m)
	switch {
	case err == nil:
		c.ack(m, OutcomeAcked, start)
	case ctx.Err() != nil:
		// The shutdown deadline cut the handler short: not its fault, so
		// no attempt is spent.
		c.giveBack(d, m)
		c.handled(d.Queue, env.URN, OutcomeReleased, start)
	case errors.Is(err, ErrSkip):
		c.ack(m, OutcomeSkipped, start)
	default:
		c.failed(m, err, core.ReasonFailed, start)
	}
}

func (c *Consumer) unknownURN(m *Message, handlers map[string]HandlerFunc, start time.Time) {
	err := &UnknownURNError{URN: m.Envelope.URN, Nearest: nearestURNs(m.Envelope.URN, handlers, 3)}
	switch c.unknown {
	case UnknownDelete:
		c.logger.Warn("babelqueue: dropped message with unknown URN",
			slog.String("urn", m.Envelope.URN), slog.String("queue", m.Queue), slog.String("id", m.Envelope.Meta.ID),
			slog.Any("nearest_registered", err.Nearest))
		c.ack(m, OutcomeDropped, start)
	case UnknownRelease:
		c.release(m.Delivery, c.backoff.Delay(nextAttempt(m.Envelope.Attempts)), m)
		c.handled(m.Queue, m.Envelope.URN, OutcomeReleased, start)
	case UnknownDeadLetter:
		c.toDeadLetter(m, core.ReasonUnknownURN, err, m.Envelope.Attempts, start)
	default:
		c.logger.Warn("babelqueue: no handler for URN; the message is retried, then dead-lettered",
			slog.String("urn", m.Envelope.URN), slog.String("queue", m.Queue), slog.String("id", m.Envelope.Meta.ID),
			slog.Int("attempts", m.Envelope.Attempts), slog.Any("nearest_registered", err.Nearest))
		c.failed(m, err, core.ReasonUnknownURN, start)
	}
}

// failed applies the retry / dead-letter / drop rule to a handler error.
func (c *Consumer) failed(m *Message, herr error, reason core.Reason, start time.Time) {
	next := nextAttempt(m.Envelope.Attempts)
	if next < c.maxAttempts && !IsPermanent(herr) {
		c.retry(m, next, herr, start)
		return
	}
	if c.deadLetter {
		c.toDeadLetter(m, reason, herr, next, start)
		return
	}
	c.logger.Warn("babelqueue: dropped message after its last attempt (dead-lettering is off)",
		slog.String("urn", m.Envelope.URN), slog.String("queue", m.Queue),
		slog.String("id", m.Envelope.Meta.ID), slog.Int("attempts", next), slog.Any("error", herr))
	c.ack(m, OutcomeDropped, start)
}

func (c *Consumer) retry(m *Message, next int, herr error, start time.Time) {
	d, env := m.Delivery, m.Envelope
	delay := c.backoff.Delay(next)
	c.logger.Info("babelqueue: handler failed; retrying", slog.String("urn", env.URN), slog.String("queue", d.Queue),
		slog.String("id", env.Meta.ID), slog.Int("attempts", next), slog.Duration("delay", delay), slog.Any("error", herr))
	if c.retryNative && c.caps.NativeRetry {
		c.retryNatively(m, next, delay, start)
		return
	}
	cp := env.WithAttempts(next)
	body, err := cp.Encode()
	if err != nil { // cannot happen for a decoded envelope; never lose it
		c.report(&SettleError{Op: "retry-publish", Queue: d.Queue, URN: env.URN, MessageID: env.Meta.ID, Err: err})
		c.release(d, delay, m)
		return
	}
	msg := &driver.Message{Envelope: cp, Body: body, Queue: d.Queue, Headers: ExtraHeaders(m.Headers), Delay: delay, Origin: d}
	switch err := c.send(msg); {
	case err == nil:
	case errors.Is(err, driver.ErrTooLarge):
		// A retry copy that cannot be published never will be: dead-letter
		// it (through the size fallbacks) instead of looping.
		c.logger.Warn("babelqueue: retry copy exceeds the broker's size limit; dead-lettering",
			slog.String("urn", env.URN), slog.String("queue", d.Queue), slog.String("id", env.Meta.ID))
		c.toDeadLetter(m, core.ReasonFailed, herr, next, start)
		return
	case errors.Is(err, driver.ErrRejected):
		// The broker can never take this copy (SQS: a delay past 15
		// minutes), but it can keep the original: retry natively, the
		// broker counting the attempt and keeping the delay.
		c.logger.Info("babelqueue: the broker cannot take the retry copy; retrying natively",
			slog.String("urn", env.URN), slog.String("queue", d.Queue), slog.String("id", env.Meta.ID),
			slog.Duration("delay", delay), slog.Any("reason", err))
		c.retryNatively(m, next, delay, start)
		return
	default:
		c.copyFailed("retry-publish", m, delay, err)
		return
	}
	c.metrics.Retried(d.Queue, env.URN, next)
	c.ack(m, OutcomeRetried, start)
}

func (c *Consumer) toDeadLetter(m *Message, reason core.Reason, herr error, attempts int, start time.Time) {
	d, env := m.Delivery, m.Envelope
	orig := env.Meta.Queue
	if orig == "" {
		orig = d.Queue
	}
	dl := core.NewDeadLetter(reason, herr, orig, attempts, c.now())
	if c.deadLetterNatively(m, dl, c.backoff.Delay(attempts), start) {
		return
	}
	dlq := c.dlqName(d.Queue)
	headers := ExtraHeaders(m.Headers)
	candidates := []func() (*driver.Message, error){
		// The annotated copy: the envelope with its dead_letter block.
		func() (*driver.Message, error) {
			cp := env.WithAttempts(attempts).DeadLettered(dl)
			body, err := cp.Encode()
			return &driver.Message{Envelope: cp, Body: body, Queue: dlq, Headers: headers, DeadLetter: &dl, Origin: d}, err
		},
		// Too large: the original bytes, with the reason carried natively.
		func() (*driver.Message, error) {
			return &driver.Message{Envelope: env, Body: d.Body, Queue: dlq, Headers: headers, DeadLetter: &dl, Origin: d}, nil
		},
		// Still too large: a pointer to where the original is.
		func() (*driver.Message, error) {
			small := dl
			small.Error = core.TruncateError(dl.Error, pointerErrorBytes)
			cp := env.Pointer(pointerData(d, env.Meta.ID)).WithAttempts(attempts).DeadLettered(small)
			body, err := cp.Encode()
			return &driver.Message{Envelope: cp, Body: body, Queue: dlq, DeadLetter: &dl, Origin: d}, err
		},
	}
	msg, ok := c.publishFirstFitting(candidates, m, c.backoff.Delay(attempts))
	if !ok {
		return
	}
	c.logger.Warn("babelqueue: dead-lettered", slog.String("urn", env.URN), slog.String("reason", string(reason)),
		slog.String("dlq", msg.Queue), slog.String("id", env.Meta.ID), slog.Int("attempts", attempts), slog.Any("error", herr))
	c.metrics.DeadLettered(d.Queue, env.URN, reason)
	c.ack(m, OutcomeDeadLettered, start)
}

// poison quarantines a delivery that cannot be decoded, keeping its bytes.
func (c *Consumer) poison(d *driver.Delivery, cause error, start time.Time) {
	dl := core.NewDeadLetter(core.ReasonPoison, cause, d.Queue, d.Native.Reconcile(0), c.now())
	m := &Message{Queue: d.Queue, Headers: d.Headers, Delivery: d}
	if c.deadLetterNatively(m, dl, c.backoff.Delay(1), start) {
		return
	}
	dlq := c.dlqName(d.Queue)
	candidates := []func() (*driver.Message, error){
		func() (*driver.Message, error) {
			return &driver.Message{Body: d.Body, Queue: dlq, Headers: ExtraHeaders(d.Headers), DeadLetter: &dl, Origin: d}, nil
		},
		func() (*driver.Message, error) {
			body, err := core.MarshalPointer(pointerData(d, d.Headers[driver.HeaderMessageID]))
			return &driver.Message{Body: body, Queue: dlq, DeadLetter: &dl, Origin: d}, err
		},
	}
	msg, ok := c.publishFirstFitting(candidates, m, c.backoff.Delay(1))
	if !ok {
		return
	}
	c.logger.Warn("babelqueue: quarantined poison message", slog.String("queue", d.Queue),
		slog.String("dlq", msg.Queue), slog.String("position", d.Position), slog.Any("error", cause))
	c.metrics.DeadLettered(d.Queue, "", core.ReasonPoison)
	c.ack(m, OutcomeDeadLettered, start)
}

// pointerErrorBytes bounds dead_letter.error on a pointer copy, which must
// be small whatever the destination's limit.
const pointerErrorBytes = 256

// pointerData is the data of a copy that stands in for a message too large
// to copy: where the original is, and how large it was.
func pointerData(d *driver.Delivery, id string) core.PointerData {
	return core.PointerData{Queue: d.Queue, ID: id, Position: d.Position, Bytes: len(d.Body)}
}

// publishFirstFitting publishes the first candidate copy that fits the
// broker's size limit. A copy the broker refuses as too large moves on to
// the next candidate; any other failure (or no candidate fitting) releases
// the original and reports false.
func (c *Consumer) publishFirstFitting(candidates []func() (*driver.Message, error), m *Message, releaseDelay time.Duration) (*driver.Message, bool) {
	for i, build := range candidates {
		msg, err := build()
		if err != nil { // cannot happen for a decoded envelope; never lose it
			urn, id := urnOf(m)
			c.report(&SettleError{Op: "dead-letter-publish", Queue: m.Queue, URN: urn, MessageID: id, Err: err})
			c.release(m.Delivery, releaseDelay, m)
			return nil, false
		}
		switch err := c.send(msg); {
		case err == nil:
			if i > 0 {
				c.logger.Warn("babelqueue: dead-letter copy exceeded the broker's size limit; published a smaller stand-in",
					slog.String("dlq", msg.Queue), slog.Int("stand_in", i), slog.String("position", m.Delivery.Position))
			}
			return msg, true
		case errors.Is(err, driver.ErrTooLarge) && i < len(candidates)-1:
			continue
		default:
			c.copyFailed("dead-letter-publish", m, releaseDelay, err)
			return nil, false
		}
	}
	return nil, false
}

// retryNatively releases m's delivery for the broker to redeliver after
// delay, counting attempt next as retried once the release succeeded.
func (c *Consumer) retryNatively(m *Message, next int, delay time.Duration, start time.Time) {
	d, urn := m.Delivery, m.Envelope.URN
	if c.release(d, delay, m) {
		c.metrics.Retried(d.Queue, urn, next)
		c.handled(d.Queue, urn, OutcomeRetried, start)
	}
}

// send publishes one copy. It returns nil, an error wrapping driver.ErrTooLarge
// when the copy is over the sender's size limit (checked before sending
// where the sender knows it, or reported by the broker), or the failure.
func (c *Consumer) send(msg *driver.Message) error {
	if lim, ok := c.snd.(driver.SizeLimiter); ok {
		if max := lim.MaxMessageBytes(msg.Queue); max > 0 && len(msg.Body) > max {
			return fmt.Errorf("%w: %d bytes to %s, limit %d", driver.ErrTooLarge, len(msg.Body), msg.Queue, max)
		}
	}
	ctx, cancel := c.settleCtx()
	err := c.snd.Send(ctx, []*driver.Message{msg})
	cancel()
	return err
}

// copyFailed reports the failed publish of a copy and releases the original
// for redelivery: it is never acknowledged without its copy.
func (c *Consumer) copyFailed(op string, m *Message, releaseDelay time.Duration, err error) {
	urn, id := urnOf(m)
	c.report(&SettleError{Op: op, Queue: m.Queue, URN: urn, MessageID: id, Err: err})
	c.release(m.Delivery, releaseDelay, m)
}

// deadLetterNatively moves the delivery to the broker's own dead-letter
// store when that is configured and the driver has one, and reports whether
// it took the delivery (a failed move is reported and the delivery
// released). false means the runtime publishes an annotated copy instead.
func (c *Consumer) deadLetterNatively(m *Message, dl core.DeadLetter, releaseDelay time.Duration, start time.Time) bool {
	if !c.dlqNative || !c.caps.NativeDeadLetter {
		return false
	}
	dlr, ok := c.rcv.(driver.DeadLetterer)
	if !ok {
		return false
	}
	d := m.Delivery
	ctx, cancel := c.settleCtx()
	err := dlr.DeadLetter(ctx, d, dl)
	cancel()
	urn, id := urnOf(m)
	if err != nil {
		c.report(&SettleError{Op: "dead-letter-native", Queue: d.Queue, URN: urn, MessageID: id, Err: err})
		c.release(d, releaseDelay, m)
		return true
	}
	c.metrics.DeadLettered(d.Queue, urn, dl.Reason)
	c.handled(d.Queue, urn, OutcomeDeadLettered, start)
	return true
}

func (c *Consumer) ack(m *Message, outcome Outcome, start time.Time) {
	ctx, cancel := c.settleCtx()
	defer cancel()
	urn, id := urnOf(m)
	if c.asyncAcker != nil {
		// The callback holds the names acked reports, not m: an
		// acknowledgement waiting for its batch must not keep the message,
		// its delivery and the driver's native copy of it alive.
		queue := m.Queue
		c.acks.Add(1)
		c.asyncAcker.AckAsync(ctx, m.Delivery, func(err error) {
			defer c.acks.Done()
			c.acked(queue, urn, id, outcome, start, err)
		})
		return
	}
	c.acked(m.Queue, urn, id, outcome, start, c.rcv.Ack(ctx, m.Delivery))
}

// acked records the result of the acknowledgement of message id.
func (c *Consumer) acked(queue, urn, id string, outcome Outcome, start time.Time, err error) {
	if err != nil {
		c.report(&SettleError{Op: "ack", Queue: queue, URN: urn, MessageID: id, Err: err})
	}
	c.handled(queue, urn, outcome, start)
}

// release hands d back; m may be nil. It reports whether it succeeded.
func (c *Consumer) release(d *driver.Delivery, delay time.Duration, m *Message) bool {
	ctx, cancel := c.settleCtx()
	err := c.rcv.Release(ctx, d, delay)
	cancel()
	if err != nil {
		urn, id := urnOf(m)
		c.report(&SettleError{Op: "release", Queue: d.Queue, URN: urn, MessageID: id, Err: err})
		return false
	}
	return true
}

// handled records a handler run that started at start, unless the metrics
// are NopMetrics: then the clock is not read for it.
func (c *Consumer) handled(queue, urn string, outcome Outcome, start time.Time) {
	if c.measure {
		c.metrics.Handled(queue, urn, outcome, time.Since(start))
	}
}

func (c *Consumer) report(err *SettleError) {
	c.health.settleFailed(time.Now())
	c.metrics.SettleFailed(err.Queue, err.Op)
	c.onError(err)
}

func (c *Consumer) dlqName(queue string) string {
	if c.dlqQueue != "" {
		return c.dlqQueue
	}
	if n, ok := c.rcv.(driver.DeadLetterNamer); ok {
		return n.DeadLetterQueue(queue)
	}
	return queue + ".dlq"
}

func urnOf(m *Message) (urn, id string) {
	if m == nil || m.Envelope == nil {
		return "", ""
	}
	return m.Envelope.URN, m.Envelope.Meta.ID
}

// ExtraHeaders returns the headers of h that are not contract headers: every
// "bq-" name is dropped except bq-replay-bypass, so a copy carries traceparent
// and friends while the driver writes fresh contract headers.
func ExtraHeaders(h map[string]string) map[string]string {
	var out map[string]string
	for k, v := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "bq-") && lk != "bq-replay-bypass" {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = v
	}
	return out
}

// UnknownURNError is the handler error of a message whose URN has no
// handler; it unwraps to ErrUnknownURN and names the registered URNs nearest
// to the unknown one (a typo is the usual cause).
type UnknownURNError struct {
	URN     string
	Nearest []string
}

// Error implements error.
func (e *UnknownURNError) Error() string {
	if len(e.Nearest) == 0 {
		return fmt.Sprintf("%v: %s (no handlers are registered)", ErrUnknownURN, e.URN)
	}
	return fmt.Sprintf("%v: %s (nearest registered: %s)", ErrUnknownURN, e.URN, strings.Join(e.Nearest, ", "))
}

// Unwrap returns ErrUnknownURN.
func (e *UnknownURNError) Unwrap() error { return ErrUnknownURN }
