package sqs

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

const testURN = "urn:babel:sqs:test"

// countingAPI counts the calls that matter to the tests, and records the
// WaitTimeSeconds of every ReceiveMessage.
type countingAPI struct {
	*awssqs.Client
	getURL, sendBatch, deleteBatch, receive atomic.Int32
	mu                                      sync.Mutex
	waits                                   []int32
}

func (c *countingAPI) ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, o ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	c.receive.Add(1)
	c.mu.Lock()
	c.waits = append(c.waits, in.WaitTimeSeconds)
	c.mu.Unlock()
	return c.Client.ReceiveMessage(ctx, in, o...)
}

func (c *countingAPI) GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, o ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	c.getURL.Add(1)
	return c.Client.GetQueueUrl(ctx, in, o...)
}

func (c *countingAPI) SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	c.sendBatch.Add(1)
	return c.Client.SendMessageBatch(ctx, in, o...)
}

func (c *countingAPI) DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	c.deleteBatch.Add(1)
	return c.Client.DeleteMessageBatch(ctx, in, o...)
}

func publish(t *testing.T, snd *Sender, q string, data any) *core.Envelope {
	t.Helper()
	env, err := queue.NewPublisher(snd).Publish(context.Background(), q, testURN, data)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// A message whose visibility runs out (consumer gone) comes back with
// ApproximateReceiveCount 2, which reconciles to attempts 1.
func TestVisibilityExpiryRaisesAttempts(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	publish(t, snd, q, nil)
	r1 := newTestReceiver(t, q)
	ds, err := r1.Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v, %d", err, len(ds))
	}
	_ = r1.Close(context.Background()) // the consumer dies; no heartbeat, no settlement
	r2 := newTestReceiver(t, q)
	defer r2.Close(context.Background())
	var got *queue.Message
	var mu sync.Mutex
	stop := drivertest.StartConsumer(t, r2, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		got = m
		mu.Unlock()
		return nil
	})
	drivertest.WaitUntil(t, 15*time.Second, "redelivery", func() bool { mu.Lock(); defer mu.Unlock(); return got != nil })
	_ = stop()
	if got.Envelope.Attempts != 1 || got.Delivery.Native.Count != 1 {
		t.Fatalf("attempts %d (native %+v), want 1 from ApproximateReceiveCount 2", got.Envelope.Attempts, got.Delivery.Native)
	}
}

// The heartbeat keeps a slow handler's message invisible well past the
// visibility timeout; nobody else receives it and it is handled once.
func TestHeartbeatKeepsSlowHandlerInvisible(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	publish(t, snd, q, nil)
	r := newTestReceiver(t, q) // visibility 2s, heartbeat 500ms
	defer r.Close(context.Background())
	var runs atomic.Int32
	var attempts atomic.Int32
	began, finished := make(chan struct{}), make(chan struct{})
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		runs.Add(1)
		attempts.Store(int32(m.Envelope.Attempts))
		close(began)
		time.Sleep(5 * time.Second) // 2.5 visibility timeouts
		close(finished)
		return nil
	})
	<-began
	other := newTestReceiver(t, q)
	defer other.Close(context.Background())
	polls := 0
	for done := false; !done; {
		select {
		case <-finished:
			done = true
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			ds, _ := other.Receive(ctx, 10)
			cancel()
			polls++
			if len(ds) > 0 {
				t.Fatal("a slow handler's message became visible to another consumer")
			}
		}
	}
	t.Logf("%d polls by another consumer saw nothing while the handler ran", polls)
	<-finished
	time.Sleep(500 * time.Millisecond)
	_ = stop()
	if runs.Load() != 1 || attempts.Load() != 0 {
		t.Fatalf("runs %d attempts %d, want one run at attempts 0", runs.Load(), attempts.Load())
	}
	ds, _ := other.Receive(context.Background(), 10)
	if len(ds) != 0 {
		t.Fatal("message not deleted after the slow handler succeeded")
	}
}

// On a FIFO queue a republished retry carries a new deduplication id and is
// not swallowed by the five-minute window, while a second publish of the
// same envelope is.
func TestFIFORetryNotDeduplicated(t *testing.T) {
	q := newQueue(t, true)
	snd := NewSender(client(t))
	env := publish(t, snd, q, map[string]any{"n": 1})
	body, _ := env.Encode()
	if err := snd.Send(context.Background(), []*driver.Message{{Envelope: env, Body: body, Queue: q}}); err != nil {
		t.Fatal(err)
	}
	r := newTestReceiver(t, q)
	defer r.Close(context.Background())
	var mu sync.Mutex
	var seen []int
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m.Envelope.Attempts)
		if m.Envelope.Attempts == 0 {
			return errors.New("first try fails")
		}
		return nil
	}, queue.WithRetryMode(queue.RetryRepublish))
	drivertest.WaitUntil(t, 15*time.Second, "the retry copy", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 2 })
	time.Sleep(time.Second)
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
		t.Fatalf("attempts seen %v, want [0 1]: the duplicate publish deduplicated, the retry copy not", seen)
	}
}

func TestBatchPublishChunksAndReportsPerMessage(t *testing.T) {
	q := newQueue(t, false)
	api := &countingAPI{Client: client(t)}
	snd := NewSender(api)
	var batch []queue.Outgoing
	for i := range 25 {
		env, _ := core.New(testURN, map[string]any{"i": i}, core.WithQueue(q))
		batch = append(batch, queue.Outgoing{Envelope: env})
	}
	big, _ := core.New(testURN, map[string]any{"pad": strings.Repeat("x", 300<<10)}, core.WithQueue(q))
	batch = append(batch[:12], append([]queue.Outgoing{{Envelope: big}}, batch[12:]...)...)
	err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch)
	var be *driver.BatchError
	if !errors.As(err, &be) || !errors.Is(be.Failed(12), ErrTooLarge) {
		t.Fatalf("err = %v, want only message 12 failing with ErrTooLarge", err)
	}
	for i := range batch {
		if i != 12 && be.Failed(i) != nil {
			t.Errorf("message %d failed: %v", i, be.Failed(i))
		}
	}
	if n := api.sendBatch.Load(); n != 3 {
		t.Errorf("%d SendMessageBatch calls for 25 messages, want 3", n)
	}
	if n := api.getURL.Load(); n != 1 {
		t.Errorf("%d GetQueueUrl calls, want 1 (cached)", n)
	}
	r := NewReceiver(api, q, WithWaitTime(time.Second))
	defer r.Close(context.Background())
	var handled atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error { handled.Add(1); return nil },
		queue.WithConcurrency(10), queue.WithBatchSize(10))
	drivertest.WaitUntil(t, 20*time.Second, "25 handled", func() bool { return handled.Load() == 25 })
	_ = stop()
	if n := api.deleteBatch.Load(); n >= 25 {
		t.Errorf("%d DeleteMessageBatch calls for 25 acks: acknowledgements were not batched", n)
	}
	t.Logf("25 acks in %d DeleteMessageBatch calls", api.deleteBatch.Load())
}

func TestAttributeLimits(t *testing.T) {
	env, _ := core.New(testURN, nil, core.WithQueue("q"))
	body, _ := env.Encode()
	h := map[string]string{"traceparent": "00-1-2-01", "tracestate": "a=b", "bq-replay-bypass": "1", "x-a": "1", "x-b": "2", bqJobSpoof: "spoof", "empty": ""}
	attrs, err := Attributes(&driver.Message{Envelope: env, Body: body, Headers: h}, false)
	if !errors.Is(err, ErrTooManyAttributes) || !errors.Is(err, driver.ErrRejected) {
		t.Fatalf("11 attributes: err = %v, attrs %d", err, len(attrs))
	}
	delete(h, "x-b")
	attrs, err = Attributes(&driver.Message{Envelope: env, Body: body, Headers: h}, false)
	if err != nil || len(attrs) != 10 || *attrs[AttrJob].StringValue != testURN || *attrs[AttrCreatedAt].DataType != "Number" {
		t.Fatalf("attrs %v err %v", attrs, err)
	}
	if _, ok := attrs["empty"]; ok {
		t.Error("empty value kept; SQS rejects it")
	}
	h["x-b"] = "2"
	if attrs, err := Attributes(&driver.Message{Envelope: env, Body: body, Headers: h, Origin: &driver.Delivery{}}, true); err != nil || len(attrs) != 10 {
		t.Fatalf("a copy must drop extras past the limit: %d, %v", len(attrs), err)
	}
	if got := DeadLetterQueue("orders.fifo"); got != "orders.dlq.fifo" {
		t.Errorf("FIFO DLQ %q", got)
	}
}

const bqJobSpoof = AttrJob

func TestQueueURLPrefixSkipsLookup(t *testing.T) {
	q := newQueue(t, false)
	api := &countingAPI{Client: client(t)}
	u, err := NewSender(api).urls.url(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	api.getURL.Store(0)
	snd := NewSender(api, WithQueueURLPrefix(strings.TrimSuffix(u, q)))
	publish(t, snd, q, nil)
	if api.getURL.Load() != 0 {
		t.Error("GetQueueUrl called despite the URL prefix")
	}
	if _, err := NewSender(api).urls.url(context.Background(), "no-such-queue"); err == nil {
		t.Error("a missing queue resolved")
	}
}

// Graceful shutdown releases what was received but not started at once
// (visibility 0) instead of leaving it invisible for the timeout.
func TestShutdownReleasesUnstarted(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	for range 5 {
		publish(t, snd, q, nil)
	}
	r := newTestReceiver(t, q, WithVisibilityTimeout(60*time.Second), WithHeartbeat(20*time.Second))
	started := make(chan struct{}, 5)
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		return nil
	}, queue.WithBatchSize(5))
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_ = r.Close(context.Background())
	other := newTestReceiver(t, q)
	defer other.Close(context.Background())
	got := 0
	deadline := time.Now().Add(3 * time.Second)
	for got < 4 && time.Now().Before(deadline) {
		ds, _ := other.Receive(context.Background(), 10)
		got += len(ds)
	}
	if got < 4 {
		t.Fatalf("%d messages visible after shutdown, want the 4 unstarted ones released at once", got)
	}
}

// With one handler, acknowledgements are handed over asynchronously and still
// fill DeleteMessageBatch requests; once the consumer stops every message is
// deleted (none comes back after the visibility timeout).
func TestOneHandlerBatchesDeletes(t *testing.T) {
	q := newQueue(t, false)
	api := &countingAPI{Client: client(t)}
	snd := NewSender(api)
	var batch []queue.Outgoing
	for i := range 50 {
		env, _ := core.New(testURN, map[string]any{"i": i}, core.WithQueue(q))
		batch = append(batch, queue.Outgoing{Envelope: env})
	}
	if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	r := NewReceiver(api, q, WithWaitTime(time.Second), WithVisibilityTimeout(2*time.Second))
	var handled atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error { handled.Add(1); return nil },
		queue.WithConcurrency(1), queue.WithBatchSize(10))
	drivertest.WaitUntil(t, 20*time.Second, "50 handled", func() bool { return handled.Load() == 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := api.deleteBatch.Load(); n > 25 {
		t.Errorf("%d DeleteMessageBatch calls for 50 acks by one handler, want at most 25", n)
	}
	t.Logf("50 acks by one handler in %d DeleteMessageBatch calls", api.deleteBatch.Load())
	// Nothing comes back once the visibility timeout has run out.
	r2 := newTestReceiver(t, q)
	defer r2.Close(context.Background())
	time.Sleep(2500 * time.Millisecond)
	if ds, err := r2.Receive(context.Background(), 10); err != nil || len(ds) != 0 {
		t.Errorf("after the consumer stopped: %d messages came back (%v), want 0", len(ds), err)
	}
}

// A Receive given up by its context leaves its long poll running (cutting
// it short could strand what the server already took); a message that poll
// brings is made visible again at once, not held for the visibility timeout.
func TestAbandonedPollHandsBack(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	r := newTestReceiver(t, q, WithWaitTime(2*time.Second), WithVisibilityTimeout(60*time.Second), WithHeartbeat(20*time.Second))
	defer r.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if ds, err := r.Receive(ctx, 10); !errors.Is(err, context.DeadlineExceeded) || len(ds) != 0 {
		t.Fatalf("Receive = %d deliveries, %v; want none and the deadline", len(ds), err)
	}
	publish(t, snd, q, map[string]any{"n": 1}) // the abandoned long poll takes it
	time.Sleep(500 * time.Millisecond)
	other := newTestReceiver(t, q)
	defer other.Close(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ds, _ := other.Receive(context.Background(), 10)
		if len(ds) == 1 {
			return
		}
	}
	t.Fatal("the message the abandoned poll took did not come back within 5s (its visibility timeout is 60s)")
}

// inFlightAPI records how many SendMessageBatch calls overlap, each held
// for a moment so that calls sent at once do overlap.
type inFlightAPI struct {
	*awssqs.Client
	mu       sync.Mutex
	now, max int
}

func (c *inFlightAPI) SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	c.mu.Lock()
	c.now++
	c.max = max(c.max, c.now)
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.now--; c.mu.Unlock() }()
	time.Sleep(20 * time.Millisecond)
	return c.Client.SendMessageBatch(ctx, in, o...)
}

// A batch to a standard queue has up to WithSendConcurrency
// SendMessageBatch requests in flight; one to a FIFO queue sends them one
// after another and the queue hands the messages back in the order of the
// batch. Every message arrives once either way.
func TestBatchPublishConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fifo     bool
		opts     []SenderOption
		inFlight int
	}{
		{"standard", false, nil, DefaultSendConcurrency},
		{"standard/1", false, []SenderOption{WithSendConcurrency(1)}, 1},
		{"standard/3", false, []SenderOption{WithSendConcurrency(3)}, 3},
		{"fifo", true, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, tc.fifo)
			api := &inFlightAPI{Client: client(t)}
			snd := NewSender(api, tc.opts...)
			const n = 120
			batch := make([]queue.Outgoing, n)
			for i := range batch {
				env, _ := core.New(testURN, map[string]int{"i": i}, core.WithQueue(q))
				batch[i] = queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey("one")}}
			}
			if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
				t.Fatal(err)
			}
			if api.max != tc.inFlight {
				t.Errorf("%d SendMessageBatch calls in flight at most, want %d", api.max, tc.inFlight)
			}
			r := NewReceiver(client(t), q, WithWaitTime(time.Second), WithVisibilityTimeout(5*time.Second), WithHeartbeat(time.Second))
			defer r.Close(context.Background())
			var mu sync.Mutex
			var seen []int
			stop := drivertest.StartConsumer(t, r, snd, testURN, func(_ context.Context, m *queue.Message) error {
				var d struct{ I int }
				if err := m.Envelope.DecodeData(&d); err != nil {
					return err
				}
				mu.Lock()
				seen = append(seen, d.I)
				mu.Unlock()
				return nil
			}, queue.WithConcurrency(1), queue.WithBatchSize(10))
			// CI once saw fewer than n handled within 30 s with the default
			// 30 s visibility timeout. If a poll's response is lost (the
			// SDK then retries the call), what it took stays invisible for
			// that timeout, as on SQS itself; the short timeout brings it
			// back well within the wait, handled once.
			handled := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
			defer func() {
				if t.Failed() {
					t.Logf("%d of %d handled; the queue: %s", handled(), n, queueCounts(t, q))
				}
			}()
			drivertest.WaitUntil(t, 60*time.Second, "all handled", func() bool { return handled() >= n })
			_ = stop()
			mu.Lock()
			defer mu.Unlock()
			counts := make(map[int]int, n)
			for _, i := range seen {
				counts[i]++
			}
			for i := range n {
				if counts[i] != 1 {
					t.Errorf("message %d handled %d times", i, counts[i])
				}
			}
			if tc.fifo && !slices.IsSorted(seen) {
				t.Errorf("FIFO order lost: %v", seen)
			}
		})
	}
}

// While a standard queue has a backlog, a Receive served from what a poll
// brought starts the next poll before it returns, so the messages are on
// their way while the handlers work; a FIFO queue's are not (what a poll
// takes holds its message group), so there the next poll waits for the
// next Receive.
func TestBacklogPrefetch(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			q := newQueue(t, fifo)
			snd := NewSender(client(t))
			batch := make([]queue.Outgoing, 40)
			for i := range batch {
				env, _ := core.New(testURN, map[string]int{"i": i}, core.WithQueue(q))
				batch[i] = queue.Outgoing{Envelope: env, Options: []queue.PublishOption{queue.WithKey(fmt.Sprint(i))}}
			}
			if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
				t.Fatal(err)
			}
			api := &countingAPI{Client: client(t)}
			r := NewReceiver(api, q, WithWaitTime(time.Second))
			defer r.Close(context.Background())
			for range 2 { // the first finds the backlog, the second is served from it
				if ds, err := r.Receive(context.Background(), 10); err != nil || len(ds) == 0 {
					t.Fatalf("Receive = %d, %v", len(ds), err)
				}
			}
			if fifo {
				time.Sleep(300 * time.Millisecond)
				if n := api.receive.Load(); n != 2 {
					t.Fatalf("%d ReceiveMessage calls after two receives, want 2", n)
				}
				return
			}
			drivertest.WaitUntil(t, 5*time.Second, "a third poll", func() bool { return api.receive.Load() == 3 })
		})
	}
}

// queueCounts reports the queue's approximate message counts, for a test
// that finds messages missing.
func queueCounts(t *testing.T, q string) string {
	api := client(t)
	u, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		return err.Error()
	}
	out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%v visible, %v in flight", out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)],
		out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
}

// Polls run on long-lived goroutines (one per poll in flight, at most
// maxPolls); Close ends every one of them, and the messages the last polls
// brought are visible again.
func TestCloseEndsPollers(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	batch := make([]queue.Outgoing, 60)
	for i := range batch {
		env, _ := core.New(testURN, map[string]int{"i": i}, core.WithQueue(q))
		batch[i] = queue.Outgoing{Envelope: env}
	}
	if err := queue.NewPublisher(snd).PublishBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	before := pollers() // other tests' receivers never closed
	r := NewReceiver(client(t), q, WithWaitTime(time.Second))
	got := 0
	for range 2 { // the first finds the backlog; the second runs up to 4 polls
		ds, err := r.Receive(context.Background(), 40)
		if err != nil {
			t.Fatal(err)
		}
		got += len(ds)
	}
	if n := pollers() - before; n == 0 {
		t.Fatal("no poller running after two receives")
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := goroutinesEnded("sqs.(*Receiver).poller(", before) - before; n != 0 {
		t.Fatalf("%d pollers still running after Close", n)
	}
	// What was received and never settled comes back once its visibility
	// (30s) lapses; what Close handed back is visible now.
	r2 := newTestReceiver(t, q)
	defer r2.Close(context.Background())
	back := 0
	deadline := time.Now().Add(10 * time.Second)
	for back < len(batch)-got && time.Now().Before(deadline) {
		ds, err := r2.Receive(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := r2.Ack(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
		back += len(ds)
	}
	if back != len(batch)-got {
		t.Fatalf("%d of the %d messages the polls took and Close handed back came back (%s)", back, len(batch)-got, queueCounts(t, q))
	}
}

// Deletes run on long-lived flushers (at most maxFlushers); Close ends every
// one of them, and an acknowledgement after Close (a handler finishing
// late) is still sent, on a goroutine of its own.
func TestCloseEndsFlushers(t *testing.T) {
	api := client(t)
	q := newQueue(t, false)
	const n = 30
	msgs := make([]*driver.Message, n)
	for i := range msgs {
		msgs[i] = drivertest.EncodedMessage(t, testURN, q, map[string]int{"i": i})
	}
	if err := NewSender(api).Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	before := goroutines("sqs.(*Receiver).flusher(") // other tests' receivers never closed
	r := NewReceiver(api, q, WithWaitTime(time.Second))
	var held []*driver.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for len(held) < n && time.Now().Before(deadline) {
		ds, err := r.Receive(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ds...)
	}
	if len(held) != n {
		t.Fatalf("received %d of %d", len(held), n)
	}
	late := held[n-5:]
	var wg sync.WaitGroup
	for _, d := range held[:n-5] {
		wg.Add(1)
		r.AckAsync(context.Background(), d, func(err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if goroutines("sqs.(*Receiver).flusher(")-before == 0 {
		t.Fatal("no flusher running after 25 acknowledgements")
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := goroutinesEnded("sqs.(*Receiver).flusher(", before) - before; k != 0 {
		t.Fatalf("%d flushers still running after Close", k)
	}
	for _, d := range late {
		if err := r.Ack(context.Background(), d); err != nil {
			t.Fatalf("Ack after Close: %v", err)
		}
	}
	if got := queueCounts(t, q); got != "0 visible, 0 in flight" {
		t.Fatalf("after every acknowledgement the queue holds %s", got)
	}
}

// gatedDeletes holds every DeleteMessageBatch until open is closed.
type gatedDeletes struct {
	*awssqs.Client
	open chan struct{}
}

func (g *gatedDeletes) DeleteMessageBatch(ctx context.Context, in *awssqs.DeleteMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.DeleteMessageBatchOutput, error) {
	<-g.open
	return g.Client.DeleteMessageBatch(ctx, in, o...)
}

// TestQueuedAckHoldsNoMessage: acknowledgements queued behind deletes that
// do not answer keep their receipt handles alone, not the deliveries (the
// body, the headers and the SDK's message), which the garbage collector
// reclaims meanwhile; and every one is still deleted once the deletes go
// through.
func TestQueuedAckHoldsNoMessage(t *testing.T) {
	api := &gatedDeletes{Client: client(t), open: make(chan struct{})}
	q := newQueue(t, false)
	const n = 30
	msgs := make([]*driver.Message, n)
	for i := range msgs {
		msgs[i] = drivertest.EncodedMessage(t, testURN, q, map[string]string{"pad": strings.Repeat("x", 4096)})
	}
	if err := NewSender(api).Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	r := NewReceiver(api, q, WithWaitTime(time.Second))
	defer r.Close(context.Background())
	var freed atomic.Int32
	var wg sync.WaitGroup
	for got := 0; got < n; {
		ds, err := r.Receive(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			runtime.AddCleanup(d, func(f *atomic.Int32) { f.Add(1) }, &freed)
			wg.Add(1)
			r.AckAsync(context.Background(), d, func(err error) {
				if err != nil {
					t.Error(err)
				}
				wg.Done()
			})
		}
		got += len(ds)
	}
	for deadline := time.Now().Add(5 * time.Second); freed.Load() < n && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
	}
	if k := freed.Load(); k < n {
		t.Errorf("%d of %d deliveries freed while their deletes were held, want all", k, n)
	}
	close(api.open)
	wg.Wait()
	if got := queueCounts(t, q); got != "0 visible, 0 in flight" {
		t.Fatalf("after every acknowledgement the queue holds %s", got)
	}
}

// goroutines counts the goroutines whose stacks show fn.
func goroutines(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), fn)
}

// goroutinesEnded is goroutines(fn) once it is down to want, or after a
// second: a worker's goroutine signals its WaitGroup before it returns, so
// right after Close has waited for it a stack dump can still show it.
func goroutinesEnded(fn string, want int) int {
	n := goroutines(fn)
	for deadline := time.Now().Add(time.Second); n > want && time.Now().Before(deadline); n = goroutines(fn) {
		time.Sleep(time.Millisecond)
	}
	return n
}

// pollers counts the goroutines running (*Receiver).poller.
func pollers() int { return goroutines("sqs.(*Receiver).poller(") }

// A wait under a second is rounded up to one, SQS's unit: cut to 0, it
// would turn long polling into short polling, and a consumer of an empty
// queue would send ReceiveMessage requests back to back.
func TestSubSecondWaitStillLongPolls(t *testing.T) {
	q := newQueue(t, false)
	api := &countingAPI{Client: client(t)}
	rcv := NewReceiver(api, q, WithWaitTime(300*time.Millisecond))
	defer rcv.Close(context.Background())
	stop := drivertest.StartConsumer(t, rcv, NewSender(client(t)), testURN, func(context.Context, *queue.Message) error { return nil })
	time.Sleep(2500 * time.Millisecond)
	stop()
	api.mu.Lock()
	defer api.mu.Unlock()
	// 2.5s of 1s long polls is three; a few more allow for a slow start.
	if n := len(api.waits); n == 0 || n > 6 {
		t.Fatalf("%d ReceiveMessage calls in 2.5s on an empty queue, want 1 to 6 (1s long polls)", n)
	}
	for _, w := range api.waits {
		if w != 1 {
			t.Fatalf("WaitTimeSeconds %d, want 1 (300ms rounded up)", w)
		}
	}
}

func TestWithWaitTimeRounding(t *testing.T) {
	for _, c := range []struct {
		in, want time.Duration
	}{
		{-time.Second, maxWait}, // keeps the default
		{0, 0},                  // short polling, on purpose
		{time.Nanosecond, time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{20 * time.Second, 20 * time.Second},
		{time.Hour, maxWait},
	} {
		r := NewReceiver(nil, "q", WithWaitTime(c.in))
		if r.cfg.wait != c.want {
			t.Errorf("WithWaitTime(%v): wait %v, want %v", c.in, r.cfg.wait, c.want)
		}
		_ = r.Close(context.Background())
	}
}
