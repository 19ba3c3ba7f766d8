package sqs

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core/queue"
)

// gatedAPI holds every send request while gate is open (a non-nil channel
// not yet closed), records what each carried, and fails the batch entry
// whose body contains failBody.
type gatedAPI struct {
	*awssqs.Client
	gate     chan struct{}
	failBody string

	mu       sync.Mutex
	requests []string // "send" for SendMessage, "batch/<n>" for SendMessageBatch
}

func (g *gatedAPI) record(r string) {
	g.mu.Lock()
	g.requests = append(g.requests, r)
	g.mu.Unlock()
}

func (g *gatedAPI) recorded() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.requests)
}

func (g *gatedAPI) SendMessage(ctx context.Context, in *awssqs.SendMessageInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	if g.gate != nil {
		<-g.gate
	}
	g.record("send")
	return g.Client.SendMessage(ctx, in, o...)
}

func (g *gatedAPI) SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	if g.gate != nil {
		<-g.gate
	}
	g.record("batch/" + strconv.Itoa(len(in.Entries)))
	var failed []types.BatchResultErrorEntry
	if g.failBody != "" {
		keep := *in
		keep.Entries = nil
		for _, e := range in.Entries {
			if strings.Contains(aws.ToString(e.MessageBody), g.failBody) {
				failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String("refused by the test"), SenderFault: true})
				continue
			}
			keep.Entries = append(keep.Entries, e)
		}
		in = &keep
	}
	out, err := g.Client.SendMessageBatch(ctx, in, o...)
	if err == nil {
		out.Failed = append(out.Failed, failed...)
	}
	return out, err
}

// receiveBodies receives n messages from q (deleting them) and returns
// their bodies; it waits at most a few seconds more for any further one.
func receiveBodies(t *testing.T, q string, n int) []string {
	t.Helper()
	api := client(t)
	u, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	deadline := time.Now().Add(20 * time.Second)
	for empty := 0; time.Now().Before(deadline) && (len(bodies) < n || empty < 1); {
		out, err := api.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := api.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: u.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bodies
}

// publishConcurrently starts one Publish of {"i": i} per i in is and
// returns a wait for their errors, by i.
func publishConcurrently(pub *queue.Publisher, q string, is ...int) func() map[int]error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[int]error{}
	for _, i := range is {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := pub.Publish(context.Background(), q, testURN, map[string]any{"i": i})
			mu.Lock()
			errs[i] = err
			mu.Unlock()
		}()
	}
	return func() map[int]error { wg.Wait(); return errs }
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// Single messages published concurrently while the queue's requests are
// all in flight leave together in SendMessageBatch requests of up to ten;
// a lone publish is one SendMessage. Without coalescing, each is its own
// SendMessage.
func TestCoalescesConcurrentSends(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		name := "coalescing"
		opts := []SenderOption{WithSendConcurrency(1)}
		if !coalesce {
			name = "WithoutCoalescing"
			opts = append(opts, WithoutCoalescing())
		}
		t.Run(name, func(t *testing.T) {
			q := newQueue(t, false)
			api := &gatedAPI{Client: client(t)}
			snd := NewSender(api, opts...)
			pub := queue.NewPublisher(snd)
			publish(t, snd, q, map[string]any{"i": -1})
			if got := api.recorded(); !slices.Equal(got, []string{"send"}) {
				t.Fatalf("a lone publish made %v, want one SendMessage", got)
			}
			api.mu.Lock()
			api.requests = nil
			api.mu.Unlock()

			api.gate = make(chan struct{})
			wait := publishConcurrently(pub, q, seq(0, 21)...)
			time.Sleep(300 * time.Millisecond) // all 21 sent or waiting
			close(api.gate)
			for i, err := range wait() {
				if err != nil {
					t.Errorf("publish %d: %v", i, err)
				}
			}
			reqs := api.recorded()
			if coalesce {
				// The first request takes what waits when it leaves; the
				// rest wait for it and leave ten at a time.
				n := 0
				for _, r := range reqs {
					k, _ := strconv.Atoi(strings.TrimPrefix(r, "batch/"))
					n += max(k, 1)
				}
				if n != 21 || len(reqs) > 4 {
					t.Errorf("21 concurrent publishes made %d requests %v, want the first and then batches of ten", len(reqs), reqs)
				}
			} else if len(reqs) != 21 || slices.ContainsFunc(reqs, func(r string) bool { return r != "send" }) {
				t.Errorf("21 publishes without coalescing made %v, want 21 SendMessage", reqs)
			}
			bodies := receiveBodies(t, q, 22)
			if len(bodies) != 22 {
				t.Fatalf("received %d messages, want 22", len(bodies))
			}
		})
	}
}

// A message refused inside a shared request fails its own publish only.
func TestCoalescedEntryFailureIsItsPublishers(t *testing.T) {
	q := newQueue(t, false)
	api := &gatedAPI{Client: client(t), failBody: `"i":99`}
	snd := NewSender(api, WithSendConcurrency(1))
	pub := queue.NewPublisher(snd)
	publish(t, snd, q, map[string]any{"i": -1}) // the queue URL
	api.gate = make(chan struct{})
	first := publishConcurrently(pub, q, seq(0, 4)...)
	time.Sleep(200 * time.Millisecond)
	failing := publishConcurrently(pub, q, 99) // waits behind the first request
	time.Sleep(100 * time.Millisecond)
	last := publishConcurrently(pub, q, seq(4, 7)...) // shares its request
	time.Sleep(200 * time.Millisecond)
	close(api.gate)
	for _, errs := range []map[int]error{first(), last()} {
		for i, err := range errs {
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
			}
		}
	}
	// (Sent alone, with SendMessage, it would not have been refused.)
	var ee *EntryError
	if err := failing()[99]; !errors.As(err, &ee) || ee.Code != "InvalidParameterValue" {
		t.Errorf("the refused message's publish returned %v, want its *EntryError (requests: %v)", err, api.recorded())
	}
	if bodies := receiveBodies(t, q, 8); len(bodies) != 8 {
		t.Errorf("received %d messages, want the 8 not refused", len(bodies))
	}
}

// A publish whose context ends while its message waits for a request
// returns the context's error, and its message is not sent.
func TestCancelledWaitingSendIsNotSent(t *testing.T) {
	q := newQueue(t, false)
	api := &gatedAPI{Client: client(t)}
	snd := NewSender(api, WithSendConcurrency(1))
	pub := queue.NewPublisher(snd)
	publish(t, snd, q, map[string]any{"i": -1}) // the queue URL
	api.gate = make(chan struct{})
	held := publishConcurrently(pub, q, 0)
	time.Sleep(200 * time.Millisecond) // 0 in flight, held at the gate
	// Cancelled, not timed out: a request keeps its callers' latest
	// deadline, so only the removal from the waiting list keeps a message
	// whose caller set none from leaving.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
	_, err := pub.Publish(ctx, q, testURN, map[string]any{"i": 1})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the waiting publish returned %v, want its context's cancellation", err)
	}
	close(api.gate)
	if err := held()[0]; err != nil {
		t.Fatal(err)
	}
	bodies := receiveBodies(t, q, 2)
	if len(bodies) != 2 || slices.ContainsFunc(bodies, func(b string) bool { return strings.Contains(b, `"i":1`) }) {
		t.Errorf("received %d messages %v, want -1 and 0 only", len(bodies), bodies)
	}
}
