package azureservicebus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// WithMaxSessions sets how many sessions a SessionReceiver holds at once
// (default 8): the number of keys handled in parallel.
func WithMaxSessions(n int) ReceiverOption { return func(c *config) { c.maxSessions = n } }

// WithSessionIdleTimeout sets how long a SessionReceiver keeps a session
// with no message before it closes it and accepts the next one (default 2s).
// Keep it below the entity's lock duration unless lock renewal is on.
func WithSessionIdleTimeout(d time.Duration) ReceiverOption {
	return func(c *config) { c.sessionIdle = d }
}

// WithSessionPrefetch sets how many messages of a session a SessionReceiver
// receives ahead of the one being handled (default 0, as the .NET session
// processor). Prefetched messages are locked with the session; at shutdown
// they are abandoned, which raises their DeliveryCount.
func WithSessionPrefetch(n int) ReceiverOption { return func(c *config) { c.prefetch = n } }

// acceptWait bounds one wait for the next available session; the broker
// answers CodeTimeout when none became available, and the wait starts over.
const acceptWait = 30 * time.Second

// closeWait bounds the abandons and the link close of a session at shutdown.
const closeWait = 10 * time.Second

// SessionReceiver receives from a session-enabled queue or subscription,
// holding up to WithMaxSessions sessions at once. Within a session it hands
// the runtime one message at a time, in the broker's order, and hands the
// next only once the previous one is settled; an abandoned message is
// handed again before any later one, so a native retry keeps the order.
// Deliveries carry the session id as their ordering key. A session is
// closed after WithSessionIdleTimeout without messages and the next
// available one accepted.
//
// Session locks are renewed while a session is held; a lost session lock
// makes the settlement of its message return ErrLockLost, and the messages
// come back with their DeliveryCount raised, to this or another receiver.
//
// It implements driver.Receiver and driver.DeadLetterer.
type SessionReceiver struct {
	client *azservicebus.Client
	queue  string
	cfg    config

	out  chan *driver.Delivery
	errs chan error

	// Sessions receive from the broker only while a Receive is waiting, so
	// that nothing is fetched for a consumer that stopped receiving.
	receiving atomic.Int32
	demandMu  sync.Mutex
	demand    chan struct{} // closed (and replaced) when a Receive starts

	start  sync.Once
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// NewSessionReceiver returns a receiver of the sessions of the
// session-enabled queue (or, with WithSubscription, topic subscription).
// It accepts sessions from the first Receive on.
func NewSessionReceiver(client *azservicebus.Client, queue string, opts ...ReceiverOption) (*SessionReceiver, error) {
	cfg := newConfig(opts)
	if cfg.maxSessions < 1 {
		return nil, fmt.Errorf("babelqueue/azureservicebus: WithMaxSessions(%d): need at least 1", cfg.maxSessions)
	}
	if cfg.sessionIdle <= 0 || cfg.prefetch < 0 {
		return nil, errors.New("babelqueue/azureservicebus: the session idle timeout must be positive and the prefetch not negative")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &SessionReceiver{
		client: client, queue: queue, cfg: cfg,
		out: make(chan *driver.Delivery), errs: make(chan error, cfg.maxSessions),
		demand: make(chan struct{}), ctx: ctx, cancel: cancel,
	}, nil
}

// Capabilities implements driver.Receiver: an abandon raises DeliveryCount,
// and dead-lettering is native.
func (r *SessionReceiver) Capabilities() driver.Capabilities {
	return driver.Capabilities{NativeRetry: true, NativeDeadLetter: true}
}

// Receive implements driver.Receiver: it returns the next message of each
// held session that has one, up to max.
func (r *SessionReceiver) Receive(ctx context.Context, max int) ([]*driver.Delivery, error) {
	if r.closed.Load() {
		return nil, driver.ErrClosed
	}
	r.start.Do(func() {
		r.wg.Add(r.cfg.maxSessions)
		for range r.cfg.maxSessions {
			go r.acceptLoop()
		}
	})
	r.receiving.Add(1)
	defer r.receiving.Add(-1)
	r.demandMu.Lock()
	close(r.demand)
	r.demand = make(chan struct{})
	r.demandMu.Unlock()
	wait := time.NewTimer(r.cfg.pollWait)
	defer wait.Stop()
	var ds []*driver.Delivery
	select {
	case d := <-r.out:
		ds = append(ds, d)
	case err := <-r.errs:
		return nil, err
	case <-wait.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.ctx.Done():
		return nil, driver.ErrClosed
	}
	for len(ds) < max {
		select {
		case d := <-r.out:
			ds = append(ds, d)
		default:
			return ds, nil
		}
	}
	return ds, nil
}

// acceptLoop is one session slot: it accepts the next available session,
// runs it until it is idle, lost or the receiver closes, and starts over.
func (r *SessionReceiver) acceptLoop() {
	defer r.wg.Done()
	pause := 50 * time.Millisecond
	for r.ctx.Err() == nil {
		sr, err := r.accept()
		if err != nil {
			var sbErr *azservicebus.Error
			switch {
			case r.ctx.Err() != nil:
				return
			case errors.Is(err, context.DeadlineExceeded), errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout:
				continue // no session became available
			}
			r.report(fmt.Errorf("babelqueue/azureservicebus: accepting a session of %s: %w", r.queue, err))
			select {
			case <-r.ctx.Done():
			case <-time.After(pause):
			}
			pause = min(2*pause, 5*time.Second)
			continue
		}
		pause = 50 * time.Millisecond
		s := &session{r: r, sr: sr, id: sr.SessionID(), settled: make(chan settlement, 1),
			lockDur: max(time.Until(sr.LockedUntil()), time.Second)}
		s.until.Store(sr.LockedUntil().UnixNano())
		s.run()
	}
}

func (r *SessionReceiver) accept() (*azservicebus.SessionReceiver, error) {
	ctx, cancel := context.WithTimeout(r.ctx, acceptWait)
	defer cancel()
	opts := &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock}
	if r.cfg.subscription != "" {
		return r.client.AcceptNextSessionForSubscription(ctx, r.cfg.topic, r.cfg.subscription, opts)
	}
	return r.client.AcceptNextSessionForQueue(ctx, r.queue, opts)
}

// report hands err to the next Receive, or drops it when enough are queued.
func (r *SessionReceiver) report(err error) {
	select {
	case r.errs <- err:
	default:
	}
}

// session is one held session. Its run loop is the only user of sr apart
// from the settlement of the one message handed out.
type session struct {
	r       *SessionReceiver
	sr      *azservicebus.SessionReceiver
	id      string
	settled chan settlement // the handed-out message's outcome
	until   atomic.Int64    // lock expiry, unix ns
	lockDur time.Duration   // the session lock's duration, read at acceptance
	ticker  *time.Ticker    // lock upkeep while waiting, run loop only

	mu   sync.Mutex
	lost error // set once the session lock is gone (or the session closed)
}

type settlement struct {
	released bool
	err      error
	// delayed is set by a Release with a delay: the run loop abandons
	// the message itself once the delay has passed, holding the session
	// (and so the order of its later messages) meanwhile.
	delayed *azservicebus.ReceivedMessage
	delay   time.Duration
}

// sessionToken is the driver.Delivery token of a session message.
type sessionToken struct {
	s       *session
	msg     *azservicebus.ReceivedMessage
	settled atomic.Bool
}

// As serves driver.Delivery.As (see receivedAs).
func (t *sessionToken) As(target any) bool { return receivedAs(t.msg, target) }

func (s *session) lose(err error) {
	s.mu.Lock()
	if s.lost == nil {
		s.lost = err
	}
	s.mu.Unlock()
}

// check returns the error a settlement must report instead of settling:
// the session lock was lost, or has expired.
func (s *session) check() error {
	if time.Now().UnixNano() > s.until.Load() {
		s.lose(fmt.Errorf("%w: the lock of session %q expired", ErrLockLost, s.id))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

func (s *session) run() {
	defer s.close()
	s.ticker = time.NewTicker(s.tick())
	defer s.ticker.Stop()
	var (
		buf      []*azservicebus.ReceivedMessage // received, not handed out, in sequence order
		refetch  bool                            // an abandoned message should come back first
		idleFrom = time.Now()
	)
	for {
		if s.r.ctx.Err() != nil {
			s.abandon(buf)
			return
		}
		if len(buf) == 0 || refetch {
			if !s.awaitDemand() {
				s.abandon(buf)
				return
			}
			wait := s.r.cfg.pollWait
			if len(buf) == 0 {
				wait = s.r.cfg.sessionIdle - time.Since(idleFrom)
				if wait <= 0 {
					return // idle: make room for another session
				}
			}
			if t := s.r.cfg.renewTick(); t > 0 {
				wait = min(wait, max(t, s.lockDur/4))
			}
			msgs, err := s.fetch(wait, 1+s.r.cfg.prefetch-len(buf))
			if err != nil {
				s.abandon(buf)
				return
			}
			refetch = false
			buf = append(buf, msgs...)
			slices.SortFunc(buf, func(a, b *azservicebus.ReceivedMessage) int {
				return cmp.Compare(seq(a), seq(b))
			})
			if !s.keep(time.Time{}) {
				return
			}
			if len(buf) == 0 {
				continue
			}
		}
		m := buf[0]
		buf = buf[1:]
		tok := &sessionToken{s: s, msg: m}
		d := delivery(s.r.queue, m, tok)
		d.OrderingKey = s.id
		if !s.hand(d) {
			s.abandon(append([]*azservicebus.ReceivedMessage{m}, buf...))
			return
		}
		o, ok := s.await()
		if !ok || o.err != nil {
			return // lost, closing, or the link is in doubt: its messages come back
		}
		if o.delayed != nil && !s.abandonAfter(o.delayed, o.delay) {
			return
		}
		refetch = o.released
		idleFrom = time.Now()
	}
}

func seq(m *azservicebus.ReceivedMessage) int64 {
	if m.SequenceNumber == nil {
		return 0
	}
	return *m.SequenceNumber
}

// fetch receives up to n messages, waiting at most wait for the first.
func (s *session) fetch(wait time.Duration, n int) ([]*azservicebus.ReceivedMessage, error) {
	ctx, cancel := context.WithTimeout(s.r.ctx, wait)
	msgs, err := s.sr.ReceiveMessages(ctx, n, nil)
	cancel()
	if err == nil || len(msgs) > 0 || errors.Is(err, context.DeadlineExceeded) && s.r.ctx.Err() == nil {
		return msgs, nil
	}
	if s.r.ctx.Err() == nil {
		s.r.cfg.logger.Warn("babelqueue/azureservicebus: receiving from a session failed; closing it",
			slog.String("queue", s.r.queue), slog.String("session", s.id), slog.Any("error", err))
	}
	return nil, err
}

// awaitDemand waits until a Receive is waiting for deliveries, keeping the
// session lock meanwhile; false when the receiver closed or the lock was
// lost first.
func (s *session) awaitDemand() bool {
	r := s.r
	for r.receiving.Load() == 0 {
		r.demandMu.Lock()
		demand := r.demand
		r.demandMu.Unlock()
		if r.receiving.Load() > 0 {
			break
		}
		select {
		case <-demand:
		case <-r.ctx.Done():
			return false
		case <-s.ticker.C:
			if !s.keep(time.Time{}) {
				return false
			}
		}
	}
	return true
}

// hand passes d to Receive, keeping the session lock meanwhile; false when
// the receiver closed or the lock was lost first (d was not handed out).
func (s *session) hand(d *driver.Delivery) bool {
	for {
		select {
		case s.r.out <- d:
			return true
		case <-s.r.ctx.Done():
			return false
		case <-s.ticker.C:
			if !s.keep(time.Time{}) {
				return false
			}
		}
	}
}

// await waits for the handed-out message to be settled, renewing the
// session lock for at most WithMaxLockRenewal.
func (s *session) await() (settlement, bool) {
	since := time.Now()
	for {
		select {
		case o := <-s.settled:
			return o, true
		case <-s.r.ctx.Done():
			return settlement{}, false
		case <-s.ticker.C:
			if !s.keep(since) {
				return settlement{}, false
			}
		}
	}
}

func (s *session) tick() time.Duration {
	if t := s.r.cfg.renewTick(); t > 0 {
		return t
	}
	return 100 * time.Millisecond // no renewal: only watch for expiry
}

// keep renews the session lock when it would expire before the next round
// (unless a message has been in hand for longer than WithMaxLockRenewal)
// and reports whether the session is still held.
func (s *session) keep(handedSince time.Time) bool {
	if s.check() != nil {
		return false
	}
	if s.r.cfg.renewTick() <= 0 || !handedSince.IsZero() && time.Since(handedSince) > s.r.cfg.maxRenewal {
		return true
	}
	if !s.r.cfg.renewDue(time.Unix(0, s.until.Load()), s.lockDur, time.Now()) {
		return true
	}
	ctx, cancel := context.WithTimeout(s.r.ctx, max(s.lockDur/2, time.Second))
	err := s.sr.RenewSessionLock(ctx, nil)
	cancel()
	if err == nil {
		s.until.Store(s.sr.LockedUntil().UnixNano())
		return true
	}
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeLockLost {
		s.lose(fmt.Errorf("%w: session %q: %v", ErrLockLost, s.id, err))
	}
	if s.r.ctx.Err() == nil {
		s.r.cfg.logger.Warn("babelqueue/azureservicebus: session lock renewal failed",
			slog.String("queue", s.r.queue), slog.String("session", s.id), slog.Any("error", err))
	}
	return s.check() == nil
}

// abandonAfter keeps the session (renewing its lock) for delay, then
// abandons m: a native retry that keeps the backoff and the session's
// order. It reports whether the session is still held.
func (s *session) abandonAfter(m *azservicebus.ReceivedMessage, delay time.Duration) bool {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			ctx, cancel := context.WithTimeout(context.WithoutCancel(s.r.ctx), closeWait)
			defer cancel()
			if err := abandon(ctx, s.sr, m); err != nil {
				s.r.cfg.logger.Warn("babelqueue/azureservicebus: delayed abandon failed; the message comes back when the session lock expires",
					slog.String("queue", s.r.queue), slog.String("session", s.id), slog.Any("error", err))
				return false
			}
			return true
		case <-s.r.ctx.Done():
			return false // closing: the session's messages come back
		case <-s.ticker.C:
			// Renewed for the whole delay, past WithMaxLockRenewal if need
			// be: the delay is finite, and it is the backoff asked for.
			if !s.keep(time.Time{}) {
				return false
			}
		}
	}
}

// abandon hands back messages that were received but never handed out,
// counting them in bq-returned: no attempt is spent on them.
func (s *session) abandon(msgs []*azservicebus.ReceivedMessage) {
	if len(msgs) == 0 || s.check() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.r.ctx), closeWait)
	defer cancel()
	for _, m := range msgs {
		if err := returnMessage(ctx, s.sr, m); err != nil {
			s.r.cfg.logger.Warn("babelqueue/azureservicebus: abandoning a prefetched session message failed",
				slog.String("queue", s.r.queue), slog.String("session", s.id), slog.Any("error", err))
			return
		}
	}
}

// close releases the session: a message still in hand can no longer be
// settled (its settlement reports ErrLockLost) and comes back.
func (s *session) close() {
	s.lose(fmt.Errorf("%w: session %q was closed before the message was settled", ErrLockLost, s.id))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.r.ctx), closeWait)
	defer cancel()
	if err := s.sr.Close(ctx); err != nil && s.r.ctx.Err() == nil {
		s.r.cfg.logger.Warn("babelqueue/azureservicebus: closing a session failed",
			slog.String("queue", s.r.queue), slog.String("session", s.id), slog.Any("error", err))
	}
}

// settle runs op on the token of d and tells the session's run loop.
func (r *SessionReceiver) settle(ctx context.Context, d *driver.Delivery, released bool, op func(settler, *azservicebus.ReceivedMessage) error) error {
	tok, ok := d.Token.(*sessionToken)
	if !ok {
		return fmt.Errorf("babelqueue/azureservicebus: foreign delivery token %T", d.Token)
	}
	if !tok.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("babelqueue/azureservicebus: message of session %q settled twice", tok.s.id)
	}
	err := tok.s.check()
	if err == nil {
		err = op(tok.s.sr, tok.msg)
	}
	tok.s.settled <- settlement{released: released, err: err}
	return err
}

// Ack implements driver.Receiver with CompleteMessage.
func (r *SessionReceiver) Ack(ctx context.Context, d *driver.Delivery) error {
	return r.settle(ctx, d, false, func(s settler, m *azservicebus.ReceivedMessage) error { return complete(ctx, s, m) })
}

// Release implements driver.Receiver with AbandonMessage: the message is the
// session's next again, with DeliveryCount + 1. With a delay the session is
// held (its lock renewed, its later messages waiting) for that long first,
// and Release returns at once.
func (r *SessionReceiver) Release(ctx context.Context, d *driver.Delivery, delay time.Duration) error {
	if delay <= 0 {
		return r.settle(ctx, d, true, func(s settler, m *azservicebus.ReceivedMessage) error { return abandon(ctx, s, m) })
	}
	tok, ok := d.Token.(*sessionToken)
	if !ok {
		return fmt.Errorf("babelqueue/azureservicebus: foreign delivery token %T", d.Token)
	}
	if !tok.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("babelqueue/azureservicebus: message of session %q settled twice", tok.s.id)
	}
	if err := tok.s.check(); err != nil {
		tok.s.settled <- settlement{released: true, err: err}
		return err
	}
	tok.s.settled <- settlement{released: true, delayed: tok.msg, delay: delay}
	return nil
}

// Return implements driver.Returner: Release that does not count as an
// attempt (bq-returned), for deliveries the runtime hands back unhandled.
func (r *SessionReceiver) Return(ctx context.Context, d *driver.Delivery) error {
	return r.settle(ctx, d, true, func(s settler, m *azservicebus.ReceivedMessage) error { return returnMessage(ctx, s, m) })
}

// DeadLetter implements driver.DeadLetterer with DeadLetterMessage, as
// Receiver.DeadLetter does.
func (r *SessionReceiver) DeadLetter(ctx context.Context, d *driver.Delivery, dl core.DeadLetter) error {
	return r.settle(ctx, d, false, func(s settler, m *azservicebus.ReceivedMessage) error { return deadLetter(ctx, s, m, dl) })
}

// As sets target, a **azservicebus.Client, to the client sessions are
// accepted on; it reports false for any other type. A delivery's As gives
// its *azservicebus.ReceivedMessage.
func (r *SessionReceiver) As(target any) bool {
	p, ok := target.(**azservicebus.Client)
	if ok {
		*p = r.client
	}
	return ok
}

// Close stops accepting sessions, returns the messages received but not
// handed out, and closes the held sessions. Call it after the consumer's Run
// has returned, so that nothing handed out is still being handled.
func (r *SessionReceiver) Close(ctx context.Context) error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	r.cancel()
	r.start.Do(func() {}) // a Receive starting the slots has finished doing so
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
