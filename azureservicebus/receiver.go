package azureservicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// ErrLockLost reports a settlement of a message whose peek-lock was lost (it
// expired, or renewing it failed): the message was, or will be, delivered
// again, and this delivery must not be settled.
var ErrLockLost = errors.New("babelqueue/azureservicebus: message lock lost")

// ReceiverOption configures a Receiver or a SessionReceiver.
type ReceiverOption func(*config)

type config struct {
	topic, subscription string
	renewAuto           bool // renew relative to each lock's duration
	renewEvery          time.Duration
	maxRenewal          time.Duration
	pollWait            time.Duration
	maxHeld             int // delayed abandons a Receiver holds at once
	logger              *slog.Logger

	// sessions (SessionReceiver only)
	maxSessions int
	sessionIdle time.Duration
	prefetch    int
}

func newConfig(opts []ReceiverOption) config {
	cfg := config{
		renewAuto: true, maxRenewal: time.Hour, pollWait: time.Second, maxHeld: DefaultMaxHeld,
		maxSessions: 8, sessionIdle: 2 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	return cfg
}

// WithSubscription receives from a topic subscription instead of a queue;
// the queue argument of NewReceiver then names the topic the runtime sends
// retry copies and dead letters relative to.
func WithSubscription(topic, subscription string) ReceiverOption {
	return func(c *config) { c.topic, c.subscription = topic, subscription }
}

// WithLockRenewal sets how often the locks of unsettled messages (of the
// sessions held, for a SessionReceiver) are checked and renewed when they
// would expire before the next check; 0 disables renewal. By default each
// lock is renewed when half of its duration is left (read off LockedUntil
// at receipt), so every lock duration the service allows (5s to 5m) works
// without tuning.
func WithLockRenewal(every time.Duration) ReceiverOption {
	return func(c *config) { c.renewAuto, c.renewEvery = false, every }
}

// autoRenewTick is how often locks are checked under automatic renewal.
const autoRenewTick = 250 * time.Millisecond

// renewDue reports whether a lock of duration dur expiring at until must be
// renewed now: with less than half its duration left (automatic renewal),
// or less than two check intervals.
func (c *config) renewDue(until time.Time, dur time.Duration, now time.Time) bool {
	left := until.Sub(now)
	if c.renewAuto {
		return left < max(dur/2, 2*autoRenewTick)
	}
	return left < 2*c.renewEvery
}

// renewTick is how often the renewal loop looks at the locks (0: never).
func (c *config) renewTick() time.Duration {
	if c.renewAuto {
		return autoRenewTick
	}
	return c.renewEvery
}

// WithMaxLockRenewal bounds how long one message's lock is renewed
// (default 1h); after that the lock expires and the message is redelivered.
// For a SessionReceiver it bounds the renewal of the session lock while one
// message is being handled. A lock kept for the delay of a Release (the
// message's, or for a SessionReceiver its session's) is renewed until the
// abandon, however long the delay.
func WithMaxLockRenewal(d time.Duration) ReceiverOption { return func(c *config) { c.maxRenewal = d } }

// WithPollWait bounds how long one Receive waits for a first message
// (default 1s; d <= 0 keeps it: a Receive that never waits would spin).
func WithPollWait(d time.Duration) ReceiverOption {
	return func(c *config) {
		if d > 0 {
			c.pollWait = d
		}
	}
}

// DefaultMaxHeld is how many messages a Receiver holds locked for the
// delay of a Release unless WithMaxHeld says otherwise.
const DefaultMaxHeld = 1000

// WithMaxHeld bounds the messages a Receiver holds locked (renewing their
// locks) while it waits out the delay of a Release before abandoning them
// (default DefaultMaxHeld). Past it, Receive takes no more messages until
// one of them is abandoned, so a burst of failing messages retried with a
// backoff cannot pile up locks to renew and memory without bound. A
// SessionReceiver holds at most one such message a session.
func WithMaxHeld(n int) ReceiverOption {
	return func(c *config) {
		if n > 0 {
			c.maxHeld = n
		}
	}
}

// WithLogger logs lock-renewal problems to l (default slog.Default()).
func WithLogger(l *slog.Logger) ReceiverOption { return func(c *config) { c.logger = l } }

// Receiver receives in peek-lock mode from a queue or subscription. It
// implements driver.Receiver and driver.DeadLetterer.
type Receiver struct {
	rcv   *azservicebus.Receiver
	queue string
	cfg   config

	mu          sync.Mutex
	outstanding map[*token]struct{}
	delayed     map[*time.Timer]struct{} // abandons waiting out their delay
	abandoned   chan struct{}            // a delayed abandon went out
	closed      bool
	stop, done  chan struct{}
}

type token struct {
	msg      *azservicebus.ReceivedMessage
	received time.Time
	lockDur  time.Duration // LockedUntil at receipt − receipt
	lost     error         // set when renewing failed: the lock is gone
	// abandonAt is when a Release with a delay abandons the message: its
	// lock is renewed until then, past WithMaxLockRenewal if need be.
	abandonAt time.Time
}

// NewReceiver opens a peek-lock receiver on queue (or, with WithSubscription,
// on a topic subscription) and starts renewing locks.
func NewReceiver(client *azservicebus.Client, queue string, opts ...ReceiverOption) (*Receiver, error) {
	cfg := newConfig(opts)
	ro := &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock}
	var (
		rcv *azservicebus.Receiver
		err error
	)
	if cfg.subscription != "" {
		rcv, err = client.NewReceiverForSubscription(cfg.topic, cfg.subscription, ro)
	} else {
		rcv, err = client.NewReceiverForQueue(queue, ro)
	}
	if err != nil {
		return nil, fmt.Errorf("babelqueue/azureservicebus: receiver for %s: %w", queue, err)
	}
	r := &Receiver{rcv: rcv, queue: queue, cfg: cfg, outstanding: map[*token]struct{}{},
		delayed: map[*time.Timer]struct{}{}, abandoned: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.renewLoop()
	return r, nil
}

// As sets target, a **azservicebus.Receiver, to the Receiver's link; it
// reports false for any other type. A delivery's As gives its
// *azservicebus.ReceivedMessage.
func (r *Receiver) As(target any) bool {
	p, ok := target.(**azservicebus.Receiver)
	if ok {
		*p = r.rcv
	}
	return ok
}

// receivedAs serves driver.Delivery.As for the tokens of both receivers:
// target, a **azservicebus.ReceivedMessage, is set to m.
func receivedAs(m *azservicebus.ReceivedMessage, target any) bool {
	p, ok := target.(**azservicebus.ReceivedMessage)
	if ok {
		*p = m
	}
	return ok
}

// As serves driver.Delivery.As (see receivedAs).
func (t *token) As(target any) bool { return receivedAs(t.msg, target) }

// Capabilities implements driver.Receiver: an abandon raises DeliveryCount
// (after the delay asked for), and dead-lettering is native.
func (r *Receiver) Capabilities() driver.Capabilities {
	return driver.Capabilities{NativeRetry: true, Delay: true, NativeDeadLetter: true}
}

// Receive implements driver.Receiver. While WithMaxHeld messages wait out
// the delay of a Release, it waits (up to the poll wait) for one of them to
// be abandoned before it receives more.
func (r *Receiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	pctx, cancel := context.WithTimeout(ctx, r.cfg.pollWait)
	defer cancel()
	for {
		r.mu.Lock()
		closed, full := r.closed, len(r.delayed) >= r.cfg.maxHeld
		r.mu.Unlock()
		if closed {
			return nil, driver.ErrClosed
		}
		if !full {
			break
		}
		select {
		case <-r.abandoned:
		case <-pctx.Done():
			return nil, ctx.Err()
		}
	}
	msgs, err := r.rcv.ReceiveMessages(pctx, max, nil)
	if err != nil && len(msgs) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, nil
		}
		return nil, fmt.Errorf("babelqueue/azureservicebus: receive from %s: %w", r.queue, err)
	}
	now := time.Now()
	ds := make([]*driver.Delivery, 0, len(msgs))
	r.mu.Lock()
	for _, m := range msgs {
		tok := &token{msg: m, received: now, lockDur: lockDurationOf(m, now)}
		r.outstanding[tok] = struct{}{}
		ds = append(ds, delivery(r.queue, m, tok))
	}
	r.mu.Unlock()
	return ds, nil
}

// take removes d from the renewal set and returns its token, or the lock-lost
// error when renewing it had failed.
func (r *Receiver) take(d *driver.Delivery) (*token, error) {
	tok, ok := d.Token.(*token)
	if !ok {
		return nil, fmt.Errorf("babelqueue/azureservicebus: foreign delivery token %T", d.Token)
	}
	r.mu.Lock()
	delete(r.outstanding, tok)
	lost := tok.lost
	r.mu.Unlock()
	if lost != nil {
		return nil, lost
	}
	return tok, nil
}

func settleErr(op string, err error) error {
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeLockLost {
		return fmt.Errorf("%w: %s: %v", ErrLockLost, op, err)
	}
	return fmt.Errorf("babelqueue/azureservicebus: %s: %w", op, err)
}

// Ack implements driver.Receiver with CompleteMessage.
func (r *Receiver) Ack(ctx context.Context, d *driver.Delivery) error {
	tok, err := r.take(d)
	if err != nil {
		return err
	}
	return complete(ctx, r.rcv, tok.msg)
}

// Release implements driver.Receiver with AbandonMessage: Service Bus
// redelivers the message with DeliveryCount + 1. An abandon cannot be
// delayed, so with a delay the Receiver keeps the message locked (renewing
// the lock) for that long and abandons it then; if the Receiver closes
// first, the lock expires and the message comes back all the same.
func (r *Receiver) Release(ctx context.Context, d *driver.Delivery, delay time.Duration) error {
	tok, ok := d.Token.(*token)
	if !ok {
		return fmt.Errorf("babelqueue/azureservicebus: foreign delivery token %T", d.Token)
	}
	if delay <= 0 {
		if _, err := r.take(d); err != nil {
			return err
		}
		return abandon(ctx, r.rcv, tok.msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if tok.lost != nil {
		delete(r.outstanding, tok)
		return tok.lost
	}
	if r.closed {
		return driver.ErrClosed
	}
	tok.abandonAt = time.Now().Add(delay)
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		r.mu.Lock()
		_, live := r.delayed[t]
		delete(r.delayed, t)
		r.mu.Unlock()
		if !live {
			return
		}
		defer func() { // after the abandon: a Receive waiting on WithMaxHeld may go on
			select {
			case r.abandoned <- struct{}{}:
			default:
			}
		}()
		if _, err := r.take(d); err != nil {
			r.cfg.logger.Warn("babelqueue/azureservicebus: delayed abandon: the lock was lost; the message comes back when it expires",
				slog.String("queue", r.queue), slog.Any("error", err))
			return
		}
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := abandon(actx, r.rcv, tok.msg); err != nil {
			r.cfg.logger.Warn("babelqueue/azureservicebus: delayed abandon failed; the message comes back when its lock expires",
				slog.String("queue", r.queue), slog.Any("error", err))
		}
	})
	r.delayed[t] = struct{}{}
	return nil
}

// Return implements driver.Returner: it abandons a delivery the runtime
// hands back without having handled it (shutdown) and counts it in the
// bq-returned property, so attempts reconciliation does not count that
// redelivery as an attempt.
func (r *Receiver) Return(ctx context.Context, d *driver.Delivery) error {
	tok, err := r.take(d)
	if err != nil {
		return err
	}
	return returnMessage(ctx, r.rcv, tok.msg)
}

// DeadLetter implements driver.DeadLetterer: the message moves to the
// entity's dead-letter sub-queue with DeadLetterReason = the reason and
// DeadLetterErrorDescription = the error.
func (r *Receiver) DeadLetter(ctx context.Context, d *driver.Delivery, dl core.DeadLetter) error {
	tok, err := r.take(d)
	if err != nil {
		return err
	}
	return deadLetter(ctx, r.rcv, tok.msg, dl)
}

// settler is what azservicebus.Receiver and azservicebus.SessionReceiver
// have in common for settling a message.
type settler interface {
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
	AbandonMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.AbandonMessageOptions) error
	DeadLetterMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.DeadLetterOptions) error
}

func complete(ctx context.Context, s settler, m *azservicebus.ReceivedMessage) error {
	if err := s.CompleteMessage(ctx, m, nil); err != nil {
		return settleErr("complete", err)
	}
	return nil
}

func abandon(ctx context.Context, s settler, m *azservicebus.ReceivedMessage) error {
	if err := s.AbandonMessage(ctx, m, nil); err != nil {
		return settleErr("abandon", err)
	}
	return nil
}

// returnMessage abandons m with bq-returned raised by one.
func returnMessage(ctx context.Context, s settler, m *azservicebus.ReceivedMessage) error {
	n := returned(m.ApplicationProperties) + 1
	opts := &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{PropReturned: int64(n)}}
	if err := s.AbandonMessage(ctx, m, opts); err != nil {
		return settleErr("abandon", err)
	}
	return nil
}

// lockDuration estimates the entity's lock duration from a message's
// LockedUntil at receipt (at least a second; 30s, the default, when unknown).
func lockDurationOf(m *azservicebus.ReceivedMessage, now time.Time) time.Duration {
	if m.LockedUntil == nil {
		return 30 * time.Second
	}
	return max(m.LockedUntil.Sub(now), time.Second)
}

func deadLetter(ctx context.Context, s settler, m *azservicebus.ReceivedMessage, dl core.DeadLetter) error {
	opts := &azservicebus.DeadLetterOptions{Reason: ptr(string(dl.Reason))}
	if dl.Error != "" {
		opts.ErrorDescription = ptr(dl.Error)
	}
	if err := s.DeadLetterMessage(ctx, m, opts); err != nil {
		return settleErr("dead-letter", err)
	}
	return nil
}

// delivery builds the runtime's view of a received message.
func delivery(queue string, m *azservicebus.ReceivedMessage, tok any) *driver.Delivery {
	sv, hasSV := m.ApplicationProperties[PropSchemaVersion]
	pos := ""
	if m.SequenceNumber != nil {
		pos = strconv.FormatInt(*m.SequenceNumber, 10)
	}
	return &driver.Delivery{
		Body:     m.Body,
		Queue:    queue,
		Headers:  headers(m.ApplicationProperties),
		Native:   nativeAttempts(m.DeliveryCount, returned(m.ApplicationProperties)),
		Gate:     Gate(sv, hasSV),
		Token:    tok,
		Position: m.MessageID + "@" + pos,
	}
}

// renewLoop renews the lock of every unsettled message that would expire
// before the next round, from receipt until settlement.
func (r *Receiver) renewLoop() {
	defer close(r.done)
	tick := r.cfg.renewTick()
	if tick <= 0 {
		<-r.stop
		return
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.renew()
		}
	}
}

func (r *Receiver) renew() {
	now := time.Now()
	r.mu.Lock()
	var due []*token
	for tok := range r.outstanding {
		until := tok.msg.LockedUntil
		keep := now.Sub(tok.received) < r.cfg.maxRenewal || now.Before(tok.abandonAt)
		if tok.lost == nil && keep && (until == nil || r.cfg.renewDue(*until, tok.lockDur, now)) {
			due = append(due, tok)
		}
	}
	r.mu.Unlock()
	for _, tok := range due {
		ctx, cancel := context.WithTimeout(context.Background(), max(tok.lockDur/2, time.Second))
		err := r.rcv.RenewMessageLock(ctx, tok.msg, nil)
		cancel()
		if err == nil {
			continue
		}
		lost := settleErr("renew lock", err)
		r.mu.Lock()
		if _, still := r.outstanding[tok]; still && errors.Is(lost, ErrLockLost) {
			tok.lost = lost // the next settlement reports it instead of settling twice
		}
		r.mu.Unlock()
		r.cfg.logger.Warn("babelqueue/azureservicebus: lock renewal failed", slog.String("queue", r.queue), slog.Any("error", err))
	}
}

// Close stops lock renewal and closes the receiver; unsettled messages come
// back when their locks expire.
func (r *Receiver) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for t := range r.delayed {
		t.Stop() // their locks expire; the messages come back
	}
	r.delayed = nil
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	return r.rcv.Close(ctx)
}

// Prepare implements driver.Preparer: it peeks at the entity (locking
// nothing), so that a wrong endpoint, bad credentials or a missing queue
// fail Run at once with the client's error, which names the host and the
// entity.
func (r *Receiver) Prepare(ctx context.Context, _ driver.Plan) error {
	if _, err := r.rcv.PeekMessages(ctx, 1, nil); err != nil {
		return fmt.Errorf("babelqueue/azureservicebus: cannot read %s: %w", r.queue, err)
	}
	return nil
}
