package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core/driver"
)

// ReceiverAPI is the part of *sqs.Client a Receiver uses.
type ReceiverAPI interface {
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, opts ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, opts ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, opts ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
	QueueURLAPI
}

// WithWaitTime sets the long-polling wait of each ReceiveMessage (default
// 20s, the SQS maximum; a negative d keeps it). SQS waits whole seconds, so
// d is rounded up to them: a 300ms wait polls for 1s, where cutting it to 0
// would turn long polling into short polling and send a ReceiveMessage
// request back to back while the queue is empty. A wait past 20s is 20s.
// Zero asks for short polling on purpose: each Receive on an empty queue
// then returns at once.
func WithWaitTime(d time.Duration) ReceiverOption {
	return receiverOption(func(c *config) {
		if d >= 0 {
			c.wait = min(time.Duration(seconds(d))*time.Second, maxWait)
		}
	})
}

// maxWait is the longest long-polling wait SQS allows.
const maxWait = 20 * time.Second

// WithVisibilityTimeout sets the visibility timeout requested on receive and
// renewed by the heartbeat (default 30s). It is rounded up to whole
// seconds, the API's unit; d <= 0 keeps the default, as a message visible
// again at once would be received again while it is handled.
func WithVisibilityTimeout(d time.Duration) ReceiverOption {
	return receiverOption(func(c *config) {
		if d > 0 {
			c.visibility = time.Duration(seconds(d)) * time.Second
		}
	})
}

// WithHeartbeat sets how often the visibility of unsettled messages is
// extended (default a third of the visibility timeout).
func WithHeartbeat(d time.Duration) ReceiverOption {
	return receiverOption(func(c *config) { c.heartbeat = d })
}

// WithMaxExtension bounds how long the heartbeat keeps one message invisible
// (default 1h; SQS allows MaxVisibility, 12h from the receipt, and the
// heartbeat stops within it whatever d says); after that it is redelivered.
func WithMaxExtension(d time.Duration) ReceiverOption {
	return receiverOption(func(c *config) { c.maxExtension = d })
}

// Receiver receives from one queue. It implements driver.Receiver.
type Receiver struct {
	api   ReceiverAPI
	queue string
	cfg   config
	urls  *resolver
	log   *slog.Logger

	mu          sync.Mutex
	url         string
	outstanding map[*token]struct{}
	closed      bool

	ackMu     sync.Mutex
	ackQueue  []*ackReq
	flushers  int                // flushes of ackQueue asked for and not finished, at most maxFlushers
	ackSlots  chan struct{}      // bounds asynchronous acknowledgements in flight
	flushes   *workers[struct{}] // run the flushes (at most maxFlushers), until Close
	flushShut bool               // Close closed flushes: a flush runs on a goroutine of its own

	// Long polls run in the background (see Receive): what they bring
	// waits in ready for the next Receive.
	pollMu     sync.Mutex
	polling    int                // ReceiveMessage calls in flight
	pollsDone  uint64             // ReceiveMessage calls finished
	ready      []*driver.Delivery // received, not handed out yet
	pollErr    error              // the last failed poll's, for the next Receive
	abandoned  bool               // the last Receive gave up waiting (its ctx ended)
	pollsShut  bool               // Close has begun: no poll starts again
	backlog    bool               // the last poll came back full
	pollNotify chan struct{}      // a poll finished
	pollCtx    context.Context    // the polls'; cancelled rescueGrace into Close
	pollStop   context.CancelFunc
	polls      *workers[pollJob] // run the polls (at most maxPolls), until Close

	stop chan struct{}
	done chan struct{}
}

type token struct {
	handle   string
	group    string
	received time.Time
	msg      types.Message // for As
}

// As serves driver.Delivery.As: target, a *types.Message, is set to the
// message as ReceiveMessage returned it.
func (t *token) As(target any) bool {
	p, ok := target.(*types.Message)
	if ok {
		*p = t.msg
	}
	return ok
}

// ackReq is one acknowledgement waiting for its DeleteMessageBatch. It
// holds the receipt handle alone, not the token: a queued acknowledgement
// must not keep its message (the body and the SDK's copy of it) alive.
type ackReq struct {
	handle string
	done   func(error) // called once with the delete's result
	slot   bool        // holds one of ackSlots, given up before done
}

// finish gives req's slot back, if it holds one, and reports err to it.
func (r *Receiver) finish(req *ackReq, err error) {
	if req.slot {
		<-r.ackSlots
	}
	req.done(err)
}

// maxFlushers bounds the DeleteMessageBatch requests in flight at once, and
// maxAsyncAcks the acknowledgements handed over with AckAsync and not done.
const (
	maxFlushers  = 4
	maxAsyncAcks = 100 * MaxBatch
)

// NewReceiver returns a Receiver for queue (a name or a URL) and starts its
// visibility heartbeat; Close stops it.
func NewReceiver(api ReceiverAPI, queue string, opts ...ReceiverOption) *Receiver {
	cfg := config{wait: maxWait, visibility: 30 * time.Second, maxExtension: time.Hour, pollSlack: pollSlack}
	for _, o := range opts {
		o.applyReceiver(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.heartbeat <= 0 {
		cfg.heartbeat = cfg.visibility / 3
	}
	r := &Receiver{
		api: api, queue: queue, cfg: cfg, urls: &resolver{api: api, prefix: cfg.urlPrefix}, log: cfg.logger,
		outstanding: map[*token]struct{}{}, stop: make(chan struct{}), done: make(chan struct{}),
		ackSlots: make(chan struct{}, maxAsyncAcks), pollNotify: make(chan struct{}, 1),
		polls: newWorkers[pollJob](maxPolls), flushes: newWorkers[struct{}](maxFlushers),
	}
	r.pollCtx, r.pollStop = context.WithCancel(context.Background())
	go r.heartbeatLoop()
	return r
}

// Capabilities implements driver.Receiver: a release raises
// ApproximateReceiveCount, so it serves as a native retry.
func (r *Receiver) Capabilities() driver.Capabilities {
	return driver.Capabilities{NativeRetry: true, Delay: true}
}

func (r *Receiver) queueURL(ctx context.Context) (string, error) {
	r.mu.Lock()
	u := r.url
	r.mu.Unlock()
	if u != "" {
		return u, nil
	}
	u, err := r.urls.url(ctx, r.queue)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.url = u
	r.mu.Unlock()
	return u, nil
}

// Receive implements driver.Receiver with long-polling ReceiveMessage
// calls: one, or, for a limit above 10 (MaxBatch) while the last poll came
// back full (a backlog), ceil(limit/10) at once (queue.WithBatchSize(40)
// runs four), up to maxPolls. It returns as soon as one of them brings
// messages, or with none when one comes back empty after the wait time;
// the others run on, and what they bring waits for the next Receive. While
// a standard queue has a backlog, a Receive served from what earlier polls
// brought starts polls again before it returns, so that that many batches
// are always running or waiting (their visibility is extended like that of
// the deliveries handed out, and Close makes them visible again); a FIFO
// queue's next polls wait for the next Receive, since what a poll takes
// holds its message group.
//
// A poll is never cancelled with ctx: a long poll cut short may already
// have taken messages on the server, which would then stay invisible for
// the whole visibility timeout. A poll still unanswered 10 s past its wait
// time is on a hung connection: it gives up, and Receive returns an error
// saying so (the connection is dropped; the next poll opens another).
// Once a Receive has returned with ctx's error, what the polls still
// running bring is made visible again at once; Close gives them
// rescueGrace to finish, and makes whatever was received and not handed
// out visible again.
func (r *Receiver) Receive(ctx context.Context, limit int) ([]*driver.Delivery, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, driver.ErrClosed
	}
	u, err := r.queueURL(ctx)
	if err != nil {
		return nil, err
	}
	limit = max(limit, 1)
	r.pollMu.Lock()
	want := 1
	if r.backlog { // the last poll came back full: more are waiting
		want = min((limit+MaxBatch-1)/MaxBatch, maxPolls)
	}
	seen := r.pollsDone
	r.abandoned = false
	r.pollMu.Unlock()
	for {
		r.pollMu.Lock()
		if r.pollsShut {
			r.pollMu.Unlock()
			return nil, driver.ErrClosed
		}
		if n := min(limit, len(r.ready)); n > 0 {
			out := slices.Clone(r.ready[:n])
			clear(r.ready[:n])
			r.ready = r.ready[n:]
			// While a standard queue has a backlog, keep want polls'
			// worth running or waiting, so the next Receive finds
			// messages instead of only then starting its polls. (Not for
			// a FIFO queue: what a poll takes holds its message group
			// until it is handled.)
			if r.backlog && !IsFIFO(r.queue) {
				r.startPollsLocked(u, limit, want-len(r.ready)/MaxBatch)
			}
			r.pollMu.Unlock()
			return out, nil
		}
		if err := r.pollErr; err != nil {
			r.pollErr = nil
			r.pollMu.Unlock()
			return nil, err
		}
		if r.pollsDone != seen { // a long poll came back empty
			r.pollMu.Unlock()
			return nil, nil
		}
		r.startPollsLocked(u, limit, want)
		r.pollMu.Unlock()
		select {
		case <-r.pollNotify:
		case <-ctx.Done():
			// Nobody waits for the polls still running: what they bring
			// is handed back at once rather than held for a next Receive
			// that may never come.
			r.pollMu.Lock()
			r.abandoned = true
			r.pollMu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// startPollsLocked starts polls of up to limit messages until want are
// running. r.pollMu is held.
func (r *Receiver) startPollsLocked(url string, limit, want int) {
	for !r.pollsShut && r.polling < want {
		r.polling++
		r.polls.add(pollJob{url: url, n: int32(min(limit, MaxBatch))}, r.polling, r.poller)
	}
}

// pollJob is one ReceiveMessage of up to n messages from url.
type pollJob struct {
	url string
	n   int32
}

// poller runs polls until Close ends them.
func (r *Receiver) poller() { r.polls.serve(func(j pollJob) { r.poll(j.url, j.n) }) }

// maxPolls bounds the ReceiveMessage calls one Receive runs at once.
const maxPolls = 10

// rescueGrace is how long Close lets the polls still running finish (and
// hand back what they took) before it cancels them.
const rescueGrace = time.Second

// pollSlack is how long past its wait time a ReceiveMessage may take before
// the poll gives up on it: the server answers a long poll by the end of the
// wait, so a poll still unanswered pollSlack later is on a connection that
// hung (a peer gone without a reset), and waiting on would stall the
// consumer until Close.
const pollSlack = 10 * time.Second

// poll runs one ReceiveMessage and adds what it brings to ready.
func (r *Receiver) poll(url string, n int32) {
	wait := r.cfg.wait / time.Second
	limit := time.Duration(wait)*time.Second + r.cfg.pollSlack
	ctx, cancel := context.WithTimeout(r.pollCtx, limit)
	out, err := r.api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MaxNumberOfMessages:         n,
		WaitTimeSeconds:             int32(wait),
		VisibilityTimeout:           int32(r.cfg.visibility / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameMessageGroupId},
	})
	hung := err != nil && ctx.Err() != nil && r.pollCtx.Err() == nil
	cancel()
	var ds []*driver.Delivery
	if err == nil {
		ds = r.deliveries(out.Messages)
	}
	r.pollMu.Lock()
	r.polling--
	r.pollsDone++
	switch {
	case hung:
		r.pollErr = fmt.Errorf("babelqueue/sqs: ReceiveMessage: no answer %v after a %ds long poll (the connection hung?): %w",
			r.cfg.pollSlack, wait, err)
	case err != nil && r.pollCtx.Err() == nil:
		r.pollErr = fmt.Errorf("babelqueue/sqs: ReceiveMessage: %w", err)
	}
	if err == nil {
		r.backlog = len(ds) == int(n) && n == MaxBatch
	}
	abandoned := r.abandoned
	if !abandoned {
		r.ready = append(r.ready, ds...)
	}
	r.pollMu.Unlock()
	if abandoned {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r.handBack(ctx, ds)
		cancel()
	}
	select {
	case r.pollNotify <- struct{}{}:
	default:
	}
}

// deliveries turns received messages into deliveries whose visibility the
// heartbeat extends from now on.
func (r *Receiver) deliveries(msgs []types.Message) []*driver.Delivery {
	now := time.Now()
	ds := make([]*driver.Delivery, 0, len(msgs))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		headers := make(map[string]string, len(m.MessageAttributes))
		for k, v := range m.MessageAttributes {
			headers[k] = aws.ToString(v.StringValue)
		}
		count, hasCount := m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]
		sv, hasSV := headers[AttrSchemaVersion]
		box := &deliveryBox{t: token{handle: aws.ToString(m.ReceiptHandle), group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)], received: now, msg: m}}
		tok := &box.t
		r.outstanding[tok] = struct{}{}
		box.d = driver.Delivery{
			Body:        []byte(aws.ToString(m.Body)),
			Queue:       r.queue,
			Headers:     headers,
			Native:      NativeAttempts(count, hasCount),
			Gate:        Gate(sv, hasSV),
			OrderingKey: tok.group,
			Token:       tok,
			Position:    aws.ToString(m.MessageId),
		}
		ds = append(ds, &box.d)
	}
	return ds
}

// deliveryBox is a delivery and its token in one allocation.
type deliveryBox struct {
	d driver.Delivery
	t token
}

func (r *Receiver) tokenOf(d *driver.Delivery) (*token, error) {
	tok, ok := d.Token.(*token)
	if !ok {
		return nil, fmt.Errorf("babelqueue/sqs: foreign delivery token %T", d.Token)
	}
	r.mu.Lock()
	delete(r.outstanding, tok) // settled: the heartbeat lets go of it
	r.mu.Unlock()
	return tok, nil
}

// Ack implements driver.Receiver. Concurrent acknowledgements are combined
// into DeleteMessageBatch requests of up to 10.
func (r *Receiver) Ack(ctx context.Context, d *driver.Delivery) error {
	tok, err := r.tokenOf(d)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	r.enqueueAck(&ackReq{handle: tok.handle, done: func(err error) { done <- err }})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AckAsync implements driver.AsyncAcker: the delete joins the next
// DeleteMessageBatch and done gets its result, so that a consumer's handler
// goes on to the next message meanwhile and even one handler fills batches.
// It blocks while maxAsyncAcks acknowledgements are in flight.
func (r *Receiver) AckAsync(ctx context.Context, d *driver.Delivery, done func(error)) {
	tok, err := r.tokenOf(d)
	if err != nil {
		done(err)
		return
	}
	select {
	case r.ackSlots <- struct{}{}:
	case <-ctx.Done():
		done(ctx.Err())
		return
	}
	r.enqueueAck(&ackReq{handle: tok.handle, done: done, slot: true})
}

// enqueueAck queues req and asks for a flush when none runs, or when a
// whole batch waits and fewer than maxFlushers run; a flusher is started
// when none is free to take it.
func (r *Receiver) enqueueAck(req *ackReq) {
	r.ackMu.Lock()
	r.ackQueue = append(r.ackQueue, req)
	start := r.flushers == 0 || (len(r.ackQueue) >= MaxBatch && r.flushers < maxFlushers)
	own := false
	if start {
		r.flushers++
		if r.flushShut {
			own = true
		} else {
			r.flushes.add(struct{}{}, r.flushers, r.flusher)
		}
	}
	r.ackMu.Unlock()
	if own {
		go r.flushAcks()
	}
}

// flusher runs the flushes asked for until Close ends them.
func (r *Receiver) flusher() { r.flushes.serve(func(struct{}) { r.flushAcks() }) }

// flushAcks sends queued acknowledgements until none are left; whatever
// queues up while a request is in flight goes in the next batch.
func (r *Receiver) flushAcks() {
	for {
		r.ackMu.Lock()
		n := min(len(r.ackQueue), MaxBatch)
		if n == 0 {
			r.flushers--
			r.ackMu.Unlock()
			return
		}
		batch := r.ackQueue[:n:n]
		r.ackQueue = r.ackQueue[n:]
		r.ackMu.Unlock()
		r.deleteBatch(batch)
	}
}

func (r *Receiver) deleteBatch(batch []*ackReq) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := r.queueURL(ctx)
	if err == nil {
		in := &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(u), Entries: make([]types.DeleteMessageBatchRequestEntry, len(batch))}
		for i, a := range batch {
			in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: &entryIDs[i], ReceiptHandle: &a.handle}
		}
		var out *awssqs.DeleteMessageBatchOutput
		out, err = r.api.DeleteMessageBatch(ctx, in)
		if err == nil {
			var failed map[int]error
			for _, f := range out.Failed {
				if i, e := strconv.Atoi(aws.ToString(f.Id)); e == nil {
					if failed == nil {
						failed = map[int]error{}
					}
					failed[i] = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
				}
			}
			for i, a := range batch {
				r.finish(a, failed[i])
			}
			return
		}
		err = fmt.Errorf("babelqueue/sqs: DeleteMessageBatch: %w", err)
	}
	for _, a := range batch {
		r.finish(a, err)
	}
}

// MaxVisibility is the longest SQS keeps a received message invisible,
// counted from when it was received: the longest delay a Release keeps.
const MaxVisibility = 12 * time.Hour

// Release implements driver.Receiver: ChangeMessageVisibility to delay (0:
// visible at once), after which SQS redelivers it with a higher receive count.
// The delay is rounded up to whole seconds, the API's unit; past what is
// left of MaxVisibility since the message was received, which SQS would
// refuse, it is cut to that, with a warning.
func (r *Receiver) Release(ctx context.Context, d *driver.Delivery, delay time.Duration) error {
	tok, err := r.tokenOf(d)
	if err != nil {
		return err
	}
	u, err := r.queueURL(ctx)
	if err != nil {
		return err
	}
	// SQS keeps a message invisible for at most 12 hours from when it was
	// received, and refuses a longer timeout outright: a longer delay
	// becomes what is left of those 12 hours, and says so.
	left := max(int32((MaxVisibility-time.Since(tok.received))/time.Second), 0)
	secs := seconds(delay)
	if secs > left {
		secs = left
		r.log.Warn("babelqueue/sqs: the retry delay is longer than SQS keeps a message invisible; it comes back sooner",
			slog.String("queue", r.queue), slog.Duration("delay", delay), slog.Duration("kept", time.Duration(secs)*time.Second))
	}
	if _, err := r.api.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(u), ReceiptHandle: aws.String(tok.handle), VisibilityTimeout: secs,
	}); err != nil {
		return fmt.Errorf("babelqueue/sqs: ChangeMessageVisibility: %w", err)
	}
	return nil
}

// heartbeatLoop extends the visibility of every unsettled message, from
// receipt until it is acknowledged or released, so a slow handler (or a
// message waiting behind one in its group) is not redelivered meanwhile.
func (r *Receiver) heartbeatLoop() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.extend()
		}
	}
}

func (r *Receiver) extend() {
	now := time.Now()
	// SQS refuses a timeout past MaxVisibility from the receipt: the last
	// extension ends by then.
	limit := min(r.cfg.maxExtension, MaxVisibility-r.cfg.visibility)
	r.mu.Lock()
	var toks []*token
	for tok := range r.outstanding {
		if now.Sub(tok.received) < limit {
			toks = append(toks, tok)
		}
	}
	r.mu.Unlock()
	if len(toks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.heartbeat)
	defer cancel()
	if err := r.setVisibility(ctx, toks, int32(r.cfg.visibility/time.Second)); err != nil && !errors.Is(err, context.Canceled) {
		r.log.Warn("babelqueue/sqs: visibility heartbeat failed", slog.String("queue", r.queue), slog.Any("error", err))
	}
}

// setVisibility sets the visibility timeout of toks to secs, in
// ChangeMessageVisibilityBatch requests of up to 10, and returns the last
// request's error.
func (r *Receiver) setVisibility(ctx context.Context, toks []*token, secs int32) error {
	u, err := r.queueURL(ctx)
	if err != nil {
		return err
	}
	var last error
	for chunk := range slices.Chunk(toks, MaxBatch) {
		in := &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(u)}
		for i, tok := range chunk {
			in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: &entryIDs[i], ReceiptHandle: &tok.handle, VisibilityTimeout: secs,
			})
		}
		if _, err := r.api.ChangeMessageVisibilityBatch(ctx, in); err != nil {
			last = err
		}
	}
	return last
}

// As sets target, a *ReceiverAPI (or **sqs.Client when the API is one), to
// the client the Receiver receives through; it reports false otherwise. A
// delivery's As gives its types.Message.
func (r *Receiver) As(target any) bool {
	switch p := target.(type) {
	case *ReceiverAPI:
		*p = r.api
		return true
	case **awssqs.Client:
		c, ok := r.api.(*awssqs.Client)
		if ok {
			*p = c
		}
		return ok
	}
	return false
}

// Close stops the heartbeat, gives the long polls still running
// rescueGrace to finish, makes every message received and not handed out
// visible again, and waits, until ctx is done, for the acknowledgements
// already handed over to be sent. Messages handed out and never settled
// become visible again when their visibility timeout runs out; the API
// client is the caller's and stays open.
func (r *Receiver) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	// No poll starts once Close waits for them (a Receive running
	// concurrently would otherwise add a poll to the workers being closed,
	// and take messages nobody hands back); a Receive waiting for a poll
	// is woken to return ErrClosed.
	r.pollMu.Lock()
	r.pollsShut = true
	r.pollMu.Unlock()
	// No poll is asked for once pollsShut is set: the pollers run the
	// polls already asked for and end.
	r.polls.close()
	select {
	case r.pollNotify <- struct{}{}:
	default:
	}
	polled := make(chan struct{})
	go func() { r.polls.wait(); close(polled) }()
	select {
	case <-polled:
	case <-time.After(rescueGrace):
	case <-ctx.Done():
	}
	r.pollStop()
	<-polled
	r.pollMu.Lock()
	unsent := r.ready
	r.ready = nil
	r.pollMu.Unlock()
	r.handBack(ctx, unsent)
	// From here on an acknowledgement (of a delivery still being handled)
	// is flushed on a goroutine of its own; the flushers finish the
	// flushes already asked for and end.
	r.ackMu.Lock()
	r.flushShut = true
	r.flushes.close()
	r.ackMu.Unlock()
	for {
		r.ackMu.Lock()
		idle := r.flushers == 0
		r.ackMu.Unlock()
		if idle {
			r.flushes.wait() // they have nothing left to run
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("babelqueue/sqs: close: acknowledgements still in flight: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// handBack makes deliveries never handed out visible again at once.
func (r *Receiver) handBack(ctx context.Context, ds []*driver.Delivery) {
	toks := make([]*token, 0, len(ds))
	for _, d := range ds {
		if tok, err := r.tokenOf(d); err == nil {
			toks = append(toks, tok)
		}
	}
	if len(toks) == 0 {
		return
	}
	if err := r.setVisibility(ctx, toks, 0); err != nil {
		r.log.Warn("babelqueue/sqs: messages received as the consumer stopped stay invisible until their visibility timeout",
			slog.String("queue", r.queue), slog.Int("messages", len(toks)), slog.Any("error", err))
	}
}

// DeadLetterQueue implements driver.DeadLetterNamer.
func (r *Receiver) DeadLetterQueue(queue string) string { return DeadLetterQueue(queue) }

// Prepare implements driver.Preparer: it resolves the queue and, when the
// consumer publishes dead-letter copies, its dead-letter queue, so that an
// unreachable endpoint or a missing queue fails Run at once with an error
// naming it. With WithQueueURLPrefix nothing is looked up.
func (r *Receiver) Prepare(ctx context.Context, p driver.Plan) error {
	if _, err := r.queueURL(ctx); err != nil {
		return err
	}
	if p.DeadLetterQueue != nil && r.cfg.urlPrefix == "" {
		if _, err := r.urls.url(ctx, p.DeadLetterQueue(r.queue)); err != nil {
			return fmt.Errorf("babelqueue/sqs: dead-letter queue: %w", err)
		}
	}
	return nil
}
