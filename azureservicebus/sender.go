package azureservicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/babelqueue/transports/core/driver"
)

// Sender publishes envelopes through one azservicebus.Sender per queue or
// topic, created on first use and cached, up to WithMaxSenders of them. It
// implements driver.Sender.
type Sender struct {
	client          *azservicebus.Client
	now             func() time.Time
	sessionFallback func(*driver.Message) string
	maxBytes        int
	maxSenders      int
	logger          *slog.Logger

	senders *driver.ProducerCache[*azservicebus.Sender]

	noCoalesce bool
	coalesce   *driver.Coalescer // single messages of concurrent Sends
}

const (
	// coalesceSlots is how many sends to one entity the single messages of
	// concurrent Sends keep in flight before they wait and share a batch.
	coalesceSlots = 8
	// coalesceMaxBatch caps the messages of one shared batch; the batch
	// also splits at the entity's size limit, as every batch does.
	coalesceMaxBatch = 100
)

// NewSender returns a Sender on client, which the caller keeps ownership of.
// Connect with azservicebus.NewClientFromConnectionString (the emulator's
// connection strings carry UseDevelopmentEmulator=true) or with
// azservicebus.NewClient and an azcore.TokenCredential.
func NewSender(client *azservicebus.Client, opts ...SenderOption) *Sender {
	s := &Sender{client: client, now: time.Now, maxBytes: StandardMaxMessageBytes, maxSenders: DefaultMaxSenders}
	for _, o := range opts {
		o(s)
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.senders = driver.NewProducerCache(s.maxSenders, s.open, func(ctx context.Context, _ string, snd *azservicebus.Sender) error {
		return snd.Close(ctx)
	})
	s.coalesce = driver.NewCoalescer(coalesceSlots, coalesceMaxBatch, func(ctx context.Context, msgs []*driver.Message) []error {
		return driver.ErrorsOf(s.send(ctx, msgs), len(msgs))
	})
	return s
}

// WithoutCoalescing sends every single-message Send (a Publisher.Publish,
// a retry or dead-letter copy) with its own SendMessage. By default, single
// messages without a session that concurrent Sends publish to one entity
// while eight sends to it are in flight wait for one to come back and then
// leave together in one message batch: a lone publisher's message never
// waits, and many concurrent publishers make fewer round trips. (Messages
// with a session always leave on their own: a partitioned entity takes a
// batch of one session only.)
func WithoutCoalescing() SenderOption { return func(s *Sender) { s.noCoalesce = true } }

// DefaultMaxSenders is how many azservicebus senders (AMQP links) a Sender
// keeps open by default.
const DefaultMaxSenders = 1000

// WithMaxSenders bounds the azservicebus senders a Sender keeps open, one
// per queue or topic, each an AMQP link (default DefaultMaxSenders; n <= 0
// keeps the default). Past the bound, the least recently used one with no
// send in progress is closed, and opened again by the next send to its
// entity: a service that publishes to many entities over time holds links
// for the ones in use, not for every entity it ever published to. A sender
// with a send in progress is never closed; while all are busy the Sender
// keeps more.
func WithMaxSenders(n int) SenderOption {
	return func(s *Sender) {
		if n > 0 {
			s.maxSenders = n
		}
	}
}

// WithSenderLogger logs to l (default slog.Default()).
func WithSenderLogger(l *slog.Logger) SenderOption { return func(s *Sender) { s.logger = l } }

// As sets target, a **azservicebus.Client, to the client the Sender sends
// through; it reports false for any other type.
func (s *Sender) As(target any) bool {
	p, ok := target.(**azservicebus.Client)
	if ok {
		*p = s.client
	}
	return ok
}

// RetainsNothing implements driver.Unretaining: a Send of two or more
// messages returns once every message batch (or message) it made was sent
// or failed, and azservicebus encodes each message into the batch, or
// go-amqp into its transfer frames, as it is added; so the Send then
// holds neither the messages nor their bodies, and a Publisher builds its
// next batch in the same memory. A function given to WithSessionFallback
// must not keep the message it is called with.
func (s *Sender) RetainsNothing() bool { return true }

// SenderOption configures a Sender.
type SenderOption func(*Sender)

// WithSessionFallback gives the session id of a message published without a
// key (queue.WithKey) and not copied from a session message; "" leaves it
// without one. A session-enabled entity rejects messages without a session
// id. Returning m.Envelope.Meta.ID puts each such message in a session of
// its own; returning m.Queue puts them all in one per queue, handled in
// order (as SQS FIFO's default message group). m.Envelope is nil for a body
// that is not an envelope (a poison copy). It is not a default because on a
// partitioned entity the session id also picks the partition.
func WithSessionFallback(f func(m *driver.Message) string) SenderOption {
	return func(s *Sender) { s.sessionFallback = f }
}

// StandardMaxMessageBytes is the message size limit of the standard tier
// (256 KiB, body and properties).
const StandardMaxMessageBytes = 256 << 10

// WithMaxMessageBytes sets the entity's message size limit (default
// StandardMaxMessageBytes; premium entities allow up to 100 MB). The
// runtime checks retry and dead-letter copies against it, less 4 KiB for
// the properties, and falls back to a smaller dead-letter copy. n <= 0
// keeps the default.
func WithMaxMessageBytes(n int) SenderOption {
	return func(s *Sender) {
		if n > 0 {
			s.maxBytes = n
		}
	}
}

// MaxMessageBytes implements driver.SizeLimiter.
func (s *Sender) MaxMessageBytes(string) int { return s.maxBytes - 4096 }

// project is Project plus the session fallback.
func (s *Sender) project(m *driver.Message) *azservicebus.Message {
	msg := Project(m, s.now())
	if msg.SessionID == nil && s.sessionFallback != nil {
		if id := s.sessionFallback(m); id != "" {
			msg.SessionID = &id
		}
	}
	return msg
}

func (s *Sender) open(queue string) (*azservicebus.Sender, error) {
	snd, err := s.client.NewSender(queue, nil)
	if err != nil {
		s.logger.Warn("babelqueue/azureservicebus: cannot open a sender", slog.String("entity", queue), slog.Any("error", err))
		return nil, fmt.Errorf("babelqueue/azureservicebus: sender for %s: %w", queue, err)
	}
	return snd, nil
}

// Send publishes msgs: a single message with SendMessage, or in a message
// batch shared with the single messages of concurrent Sends (see
// WithoutCoalescing); several in MessageBatch batches split at the entity's
// size limit. A message too large on its own fails with ErrTooLarge; a
// partial failure returns a *driver.BatchError.
func (s *Sender) Send(ctx context.Context, msgs []*driver.Message) error {
	if len(msgs) == 1 && !s.noCoalesce && s.sessionless(msgs[0]) {
		return s.coalesce.Send(ctx, msgs[0])
	}
	return s.send(ctx, msgs)
}

// sessionless reports whether m goes out without a session ID: Project
// gives it none and no session fallback is set (which is not called here,
// so that it runs once per message, in project).
func (s *Sender) sessionless(m *driver.Message) bool {
	return s.sessionFallback == nil && sessionOf(m) == ""
}

// send is Send without coalescing.
func (s *Sender) send(ctx context.Context, msgs []*driver.Message) error {
	errs := make([]error, len(msgs))
	byQueue := map[string][]int{}
	var order []string
	for i, m := range msgs {
		if _, ok := byQueue[m.Queue]; !ok {
			order = append(order, m.Queue)
		}
		byQueue[m.Queue] = append(byQueue[m.Queue], i)
	}
	for _, q := range order {
		idx := byQueue[q]
		snd, err := s.senders.Acquire(ctx, q)
		if err != nil {
			if !errors.Is(err, driver.ErrClosed) && ctx.Err() != nil {
				err = fmt.Errorf("babelqueue/azureservicebus: sender for %s: %w", q, err)
			}
			for _, i := range idx {
				errs[i] = err
			}
			continue
		}
		if len(idx) == 1 {
			errs[idx[0]] = s.sendOne(ctx, snd, msgs[idx[0]])
		} else {
			s.sendBatches(ctx, snd, msgs, idx, errs)
		}
		s.senders.Release(q)
	}
	return driver.SendResult(errs)
}

func (s *Sender) sendOne(ctx context.Context, snd *azservicebus.Sender, m *driver.Message) error {
	if err := snd.SendMessage(ctx, s.project(m), nil); err != nil {
		if errors.Is(err, azservicebus.ErrMessageTooLarge) {
			return fmt.Errorf("%w: %d bytes to %s", ErrTooLarge, len(m.Body), m.Queue)
		}
		return fmt.Errorf("babelqueue/azureservicebus: sending to %s: %w", m.Queue, err)
	}
	return nil
}

func (s *Sender) sendBatches(ctx context.Context, snd *azservicebus.Sender, msgs []*driver.Message, idx []int, errs []error) {
	var (
		batch   *azservicebus.MessageBatch
		members []int
	)
	flush := func() {
		if batch == nil || batch.NumMessages() == 0 {
			return
		}
		if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
			for _, i := range members {
				errs[i] = fmt.Errorf("babelqueue/azureservicebus: sending a batch to %s: %w", msgs[i].Queue, err)
			}
		}
		batch, members = nil, nil
	}
	for _, i := range idx {
		for attempt := 0; ; attempt++ {
			if batch == nil {
				b, err := snd.NewMessageBatch(ctx, nil)
				if err != nil {
					errs[i] = fmt.Errorf("babelqueue/azureservicebus: new batch: %w", err)
					break
				}
				batch = b
			}
			err := batch.AddMessage(s.project(msgs[i]), nil)
			if err == nil {
				members = append(members, i)
				break
			}
			if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
				errs[i] = fmt.Errorf("babelqueue/azureservicebus: batching: %w", err)
				break
			}
			if batch.NumMessages() == 0 || attempt > 0 { // too large on its own
				errs[i] = fmt.Errorf("%w: %d bytes to %s", ErrTooLarge, len(msgs[i].Body), msgs[i].Queue)
				break
			}
			flush() // full: send it and start a new one
		}
	}
	flush()
}

// Close closes every cached sender.
func (s *Sender) Close(ctx context.Context) error { return s.senders.Close(ctx) }
