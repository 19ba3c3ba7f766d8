package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core/driver"
)

// SenderAPI is the part of *sqs.Client a Sender uses.
type SenderAPI interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
	QueueURLAPI
}

// QueueURLAPI resolves queue names to URLs.
type QueueURLAPI interface {
	GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, opts ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
}

// SenderOption configures a Sender.
type SenderOption interface{ applySender(*config) }

// ReceiverOption configures a Receiver.
type ReceiverOption interface{ applyReceiver(*config) }

// CommonOption configures a Sender and a Receiver alike.
type CommonOption func(*config)

func (o CommonOption) applySender(c *config)   { o(c) }
func (o CommonOption) applyReceiver(c *config) { o(c) }

type senderOption func(*config)

func (o senderOption) applySender(c *config) { o(c) }

type receiverOption func(*config)

func (o receiverOption) applyReceiver(c *config) { o(c) }

// WithLogger logs to l (default slog.Default()).
func WithLogger(l *slog.Logger) CommonOption { return func(c *config) { c.logger = l } }

type config struct {
	urlPrefix    string
	groupFunc    func(*driver.Message) string
	wait         time.Duration
	visibility   time.Duration
	heartbeat    time.Duration
	maxExtension time.Duration
	pollSlack    time.Duration // see pollSlack; shorter in tests
	contentDedup bool
	sendParallel int
	noCoalesce   bool
	logger       *slog.Logger
}

// DefaultSendConcurrency is how many SendMessageBatch requests a Sender has
// in flight at once for one Send to a standard queue.
const DefaultSendConcurrency = 8

// WithSendConcurrency sets how many SendMessageBatch requests one Send (a
// Publisher.PublishBatch of more than ten messages) has in flight at once
// for a standard queue (default DefaultSendConcurrency; 1 sends them one
// after another), and how many requests concurrent single-message Sends
// to one queue share (see WithoutCoalescing). A FIFO queue's batch
// requests are always sent one after another, so each message group keeps
// its order.
func WithSendConcurrency(n int) SenderOption {
	return senderOption(func(c *config) { c.sendParallel = max(n, 1) })
}

// WithoutCoalescing sends every single-message Send (a Publisher.Publish,
// a retry or dead-letter copy) as its own SendMessage request. By default,
// single messages that concurrent Sends publish to one queue while the
// send concurrency's worth of requests to it are in flight wait for one to
// come back and then leave together in one SendMessageBatch (up to ten
// and 256 KiB): a lone publisher's message never waits, and many
// concurrent publishers make fewer requests (driver.Coalescer).
func WithoutCoalescing() SenderOption {
	return senderOption(func(c *config) { c.noCoalesce = true })
}

// WithContentBasedDeduplication leaves MessageDeduplicationId unset on FIFO
// queues, so the queue's own content-based deduplication applies (as the
// Java and Node SQS transports do). The queue must have
// ContentBasedDeduplication enabled. A retry copy differs from its original
// (attempts), so it is not swallowed; two identical publishes within five
// minutes are.
func WithContentBasedDeduplication() SenderOption {
	return senderOption(func(c *config) { c.contentDedup = true })
}

// WithQueueURLPrefix builds queue URLs as prefix + name instead of asking
// GetQueueUrl (for example "https://sqs.eu-west-1.amazonaws.com/123456789012/").
func WithQueueURLPrefix(prefix string) CommonOption { return func(c *config) { c.urlPrefix = prefix } }

// WithGroupFunc sets the MessageGroupId of messages to FIFO queues (default:
// the message key, else the group of the message a copy was made from, else
// the queue name).
func WithGroupFunc(fn func(*driver.Message) string) SenderOption {
	return senderOption(func(c *config) { c.groupFunc = fn })
}

// resolver maps queue names to URLs, cached.
type resolver struct {
	api    QueueURLAPI
	prefix string
	mu     sync.Mutex
	urls   map[string]string
}

func (r *resolver) url(ctx context.Context, queue string) (string, error) {
	if strings.HasPrefix(queue, "https://") || strings.HasPrefix(queue, "http://") {
		return queue, nil
	}
	if r.prefix != "" {
		return r.prefix + queue, nil
	}
	r.mu.Lock()
	u, ok := r.urls[queue]
	r.mu.Unlock()
	if ok {
		return u, nil
	}
	out, err := r.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return "", fmt.Errorf("babelqueue/sqs: resolving queue %q: %w", queue, err)
	}
	u = aws.ToString(out.QueueUrl)
	r.mu.Lock()
	if r.urls == nil {
		r.urls = map[string]string{}
	}
	r.urls[queue] = u
	r.mu.Unlock()
	return u, nil
}

// Sender publishes envelopes as SQS messages. It implements driver.Sender.
type Sender struct {
	api    SenderAPI
	cfg    config
	urls   *resolver
	clock  func() time.Time
	closed atomic.Bool

	coalesce *driver.Coalescer // single messages of concurrent Sends
}

// NewSender returns a Sender using api (an *sqs.Client; point it at a local
// server with sqs.Options.BaseEndpoint).
func NewSender(api SenderAPI, opts ...SenderOption) *Sender {
	var cfg config
	for _, o := range opts {
		o.applySender(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.sendParallel == 0 {
		cfg.sendParallel = DefaultSendConcurrency
	}
	s := &Sender{api: api, cfg: cfg, urls: &resolver{api: api, prefix: cfg.urlPrefix}, clock: time.Now}
	s.coalesce = driver.NewCoalescer(cfg.sendParallel, MaxBatch, func(ctx context.Context, msgs []*driver.Message) []error {
		return driver.ErrorsOf(s.send(ctx, msgs), len(msgs))
	})
	return s
}

// Close marks the Sender closed: later Sends fail with driver.ErrClosed.
// The API client is the caller's and stays open; the SQS API keeps no
// connection state that needs flushing, so ctx is unused.
func (s *Sender) Close(context.Context) error {
	s.closed.Store(true)
	return nil
}

// As sets target, a *SenderAPI (or **sqs.Client when the API is one), to
// the client the Sender sends through; it reports false otherwise.
func (s *Sender) As(target any) bool {
	switch p := target.(type) {
	case *SenderAPI:
		*p = s.api
		return true
	case **awssqs.Client:
		c, ok := s.api.(*awssqs.Client)
		if ok {
			*p = c
		}
		return ok
	}
	return false
}

// RetainsNothing implements driver.Unretaining: a Send of two or more
// messages copies each body into its request's MessageBody and returns
// once every request it made has returned, so it then holds neither the
// messages nor their bodies, and a Publisher builds its next batch in the
// same memory. A function given to WithGroupFunc must not keep the message
// it is called with.
func (s *Sender) RetainsNothing() bool { return true }

// entry is one message ready to send.
type entry struct {
	in  *awssqs.SendMessageInput
	idx int
}

// MaxMessageBytes implements driver.SizeLimiter: the 256 KiB limit less
// room for the message attributes.
func (s *Sender) MaxMessageBytes(string) int { return MaxMessageSize - 4096 }

// Input returns the SendMessageInput for m (queue URL left empty).
func (s *Sender) Input(m *driver.Message) (*awssqs.SendMessageInput, error) {
	attrs, err := Attributes(m, m.Origin != nil)
	if err != nil {
		return nil, err
	}
	body := string(m.Body)
	if n := size(body, attrs); n > MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	in := &awssqs.SendMessageInput{MessageBody: aws.String(body), MessageAttributes: attrs}
	switch {
	case IsFIFO(m.Queue):
		// A FIFO queue takes no per-message delay. A retry copy (the
		// runtime's RetryRepublish) goes to the back of its group at once;
		// a delay asked for at publish is refused, as SQS refuses it.
		if m.Delay > 0 && m.Origin == nil {
			return nil, fmt.Errorf("%w: FIFO queue %s takes no per-message delay (asked for %v)", ErrDelayUnsupported, m.Queue, m.Delay)
		}
		in.MessageGroupId = aws.String(s.group(m))
		if !s.cfg.contentDedup {
			in.MessageDeduplicationId = aws.String(dedupID(m))
		}
	case m.Delay > MaxDelay:
		return nil, fmt.Errorf("%w: a delay of %v is more than the %v SQS keeps (queue %s)", ErrDelayUnsupported, m.Delay, MaxDelay, m.Queue)
	default:
		in.DelaySeconds = seconds(m.Delay)
	}
	return in, nil
}

func (s *Sender) group(m *driver.Message) string {
	if s.cfg.groupFunc != nil {
		if g := s.cfg.groupFunc(m); g != "" {
			return g
		}
	}
	if m.Key != "" {
		return m.Key
	}
	if m.Origin != nil && m.Origin.OrderingKey != "" {
		return m.Origin.OrderingKey
	}
	q := m.Queue
	if i := strings.LastIndexByte(q, '/'); i >= 0 {
		q = q[i+1:]
	}
	return q
}

// dedupID is meta.id for a first send, and unique for each retry copy
// (attempts) and for dead-letter copies, so a copy is never swallowed by the
// five-minute deduplication window.
func dedupID(m *driver.Message) string {
	id := ""
	if m.Envelope != nil {
		id = m.Envelope.Meta.ID
	}
	if id == "" || len(id) > 100 || strings.ContainsFunc(id, func(r rune) bool { return r < '!' || r > '~' }) {
		sum := sha256.Sum256(m.Body)
		id = hex.EncodeToString(sum[:16])
	}
	switch {
	case m.DeadLetter != nil:
		return id + "-dlq"
	case m.Origin != nil && m.Envelope != nil:
		return id + "-a" + strconv.Itoa(m.Envelope.Attempts)
	default:
		return id
	}
}

// Send publishes msgs: a single message with SendMessage, or in a
// SendMessageBatch shared with the single messages of concurrent Sends
// (see WithoutCoalescing); several in SendMessageBatch requests of up to 10
// messages and 256 KiB. A partial failure returns a *driver.BatchError.
func (s *Sender) Send(ctx context.Context, msgs []*driver.Message) error {
	if s.closed.Load() {
		return driver.ErrClosed
	}
	if len(msgs) == 1 && !s.cfg.noCoalesce {
		return s.coalesce.Send(ctx, msgs[0])
	}
	return s.send(ctx, msgs)
}

// send is Send without coalescing.
func (s *Sender) send(ctx context.Context, msgs []*driver.Message) error {
	errs := make([]error, len(msgs))
	byURL := map[string][]entry{}
	var order []string
	for i, m := range msgs {
		in, err := s.Input(m)
		if err != nil {
			errs[i] = err
			continue
		}
		u, err := s.urls.url(ctx, m.Queue)
		if err != nil {
			errs[i] = err
			continue
		}
		in.QueueUrl = aws.String(u)
		if _, ok := byURL[u]; !ok {
			order = append(order, u)
		}
		byURL[u] = append(byURL[u], entry{in, i})
	}
	for _, u := range order {
		es := byURL[u]
		if len(es) == 1 {
			if _, err := s.api.SendMessage(ctx, es[0].in); err != nil {
				errs[es[0].idx] = fmt.Errorf("babelqueue/sqs: SendMessage: %w", err)
			}
			continue
		}
		s.sendBatches(ctx, u, chunks(es), errs)
	}
	return driver.SendResult(errs)
}

// chunks splits es into batches of at most 10 messages and 256 KiB.
func chunks(es []entry) [][]entry {
	var out [][]entry
	var cur []entry
	bytes := 0
	for _, e := range es {
		n := size(aws.ToString(e.in.MessageBody), e.in.MessageAttributes)
		if len(cur) == MaxBatch || (len(cur) > 0 && bytes+n > MaxMessageSize) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, e)
		bytes += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// sendBatches sends the batches for url: one after another for a FIFO queue
// (its order is the order of the requests), otherwise up to sendParallel at
// once. Each batch writes only its own messages' entries of errs.
func (s *Sender) sendBatches(ctx context.Context, url string, batches [][]entry, errs []error) {
	if IsFIFO(url) || s.cfg.sendParallel <= 1 || len(batches) == 1 {
		for _, b := range batches {
			s.sendBatch(ctx, url, b, errs)
		}
		return
	}
	// sendParallel goroutines take the batches in turn, rather than one
	// goroutine a batch: a fresh goroutine's stack grows, copied frame by
	// frame, through the SDK's middleware on every request.
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(s.cfg.sendParallel, len(batches)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(batches)); i = next.Add(1) - 1 {
				s.sendBatch(ctx, url, batches[i], errs)
			}
		}()
	}
	wg.Wait()
}

func (s *Sender) sendBatch(ctx context.Context, url string, es []entry, errs []error) {
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: make([]types.SendMessageBatchRequestEntry, 0, len(es))}
	for i, e := range es {
		in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
			Id:                     &entryIDs[i],
			MessageBody:            e.in.MessageBody,
			MessageAttributes:      e.in.MessageAttributes,
			DelaySeconds:           e.in.DelaySeconds,
			MessageGroupId:         e.in.MessageGroupId,
			MessageDeduplicationId: e.in.MessageDeduplicationId,
		})
	}
	out, err := s.api.SendMessageBatch(ctx, in)
	if err != nil {
		for _, e := range es {
			errs[e.idx] = fmt.Errorf("babelqueue/sqs: SendMessageBatch: %w", err)
		}
		return
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(es) {
			continue
		}
		errs[es[i].idx] = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
	}
	// Entries neither successful nor failed did not happen.
	ok := map[string]bool{}
	for _, r := range out.Successful {
		ok[aws.ToString(r.Id)] = true
	}
	for i, e := range es {
		if errs[e.idx] == nil && !ok[strconv.Itoa(i)] {
			errs[e.idx] = errors.New("babelqueue/sqs: SendMessageBatch reported no result for the message")
		}
	}
}

// EntryError is the failure of one entry of a batch request.
type EntryError struct {
	Code        string
	Message     string
	SenderFault bool
}

// Error implements error.
func (e *EntryError) Error() string {
	return fmt.Sprintf("babelqueue/sqs: batch entry failed: %s: %s", e.Code, e.Message)
}
