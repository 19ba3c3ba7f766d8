package sqs

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
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

func queueURL(t *testing.T, q string) string {
	t.Helper()
	out, err := client(t).GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

func TestSecondsRoundUp(t *testing.T) {
	for d, want := range map[time.Duration]int32{0: 0, -time.Second: 0, time.Millisecond: 1, 500 * time.Millisecond: 1,
		time.Second: 1, 1001 * time.Millisecond: 2, 90 * time.Second: 90, MaxDelay: 900,
		math.MaxInt32 * time.Second: math.MaxInt32, math.MaxInt64: math.MaxInt32} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// A delay SQS cannot keep is refused, as SQS's own API refuses it, rather
// than shortened to 15 minutes (a standard queue) or dropped (a FIFO
// queue); a FIFO retry copy goes to the back of its group undelayed.
func TestDelaysSQSCannotKeepAreRefused(t *testing.T) {
	snd := &Sender{}
	env, err := core.New(testURN, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := env.Encode()
	for _, c := range []struct {
		name  string
		m     driver.Message
		err   bool
		delay int32
	}{
		{"standard/15m", driver.Message{Queue: "q", Delay: MaxDelay}, false, 900},
		{"standard/1.5s", driver.Message{Queue: "q", Delay: 1500 * time.Millisecond}, false, 2},
		{"standard/15m1s", driver.Message{Queue: "q", Delay: MaxDelay + time.Second}, true, 0},
		{"standard/retry-copy/1h", driver.Message{Queue: "q", Delay: time.Hour, Origin: &driver.Delivery{}}, true, 0},
		{"fifo/publish/1s", driver.Message{Queue: "q.fifo", Delay: time.Second}, true, 0},
		{"fifo/publish/none", driver.Message{Queue: "q.fifo"}, false, 0},
		{"fifo/retry-copy/1s", driver.Message{Queue: "q.fifo", Delay: time.Second, Origin: &driver.Delivery{}}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := c.m
			m.Envelope, m.Body = env, body
			in, err := snd.Input(&m)
			if c.err {
				if !errors.Is(err, ErrDelayUnsupported) {
					t.Fatalf("err = %v, want ErrDelayUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.DelaySeconds != c.delay {
				t.Errorf("DelaySeconds = %d, want %d", in.DelaySeconds, c.delay)
			}
		})
	}
}

// A retry copy delayed past MaxDelay (queue.RetryRepublish with a
// 20-minute backoff) cannot be published: the runtime releases the message
// instead, and SQS keeps it invisible for the whole backoff. Before, the
// copy was published with its delay cut to 15 minutes and the original
// deleted.
func TestLongRepublishBackoffIsKeptByVisibility(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	publish(t, snd, q, nil)
	r := newTestReceiver(t, q)
	defer r.Close(context.Background())
	var runs atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		runs.Add(1)
		return errors.New("fails")
	}, queue.WithRetryMode(queue.RetryRepublish), queue.WithBackoff(queue.Constant(20*time.Minute)))
	drivertest.WaitUntil(t, 15*time.Second, "the first run", func() bool { return runs.Load() == 1 })
	api := client(t)
	counts := func() (visible, inFlight, delayed string) {
		out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL(t, q)),
			AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
		if err != nil {
			t.Fatal(err)
		}
		a := out.Attributes
		return a[string(types.QueueAttributeNameApproximateNumberOfMessages)], a[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)],
			a[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)]
	}
	// The release is asynchronous to the handler: wait for the message to
	// settle where it will stay.
	drivertest.WaitUntil(t, 10*time.Second, "the message released", func() bool {
		v, f, d := counts()
		return v == "0" && f == "1" && d == "0"
	})
	time.Sleep(2 * time.Second)
	_ = stop()
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times within seconds of a 20-minute backoff", n)
	}
	if v, f, d := counts(); v != "0" || f != "1" || d != "0" {
		t.Errorf("queue: %s visible, %s in flight, %s delayed; want the one message in flight (released for 20 minutes), no copy", v, f, d)
	}
}

// A native retry with a 500ms backoff is redelivered after a whole second
// (the API's unit), not at once. Before the fix it was truncated to 0.
func TestSubSecondBackoffIsRoundedUp(t *testing.T) {
	q := newQueue(t, false)
	snd := NewSender(client(t))
	publish(t, snd, q, nil)
	r := newTestReceiver(t, q)
	defer r.Close(context.Background())
	var mu sync.Mutex
	var at []time.Time
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) == 1 {
			return errors.New("first try fails")
		}
		return nil
	}, queue.WithBackoff(queue.Constant(500*time.Millisecond)))
	drivertest.WaitUntil(t, 15*time.Second, "the retry", func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 2 })
	_ = stop()
	if gap := at[1].Sub(at[0]); gap < 800*time.Millisecond {
		t.Errorf("retry came %v after the failure; a 500ms backoff rounds up to 1s", gap)
	}
}

// With content-based deduplication no MessageDeduplicationId is sent, and
// the queue deduplicates identical bodies itself.
func TestContentBasedDeduplication(t *testing.T) {
	needServer(t)
	name := newQueue(t, false) + "-cbd.fifo"
	api := client(t)
	if _, err := api.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}}); err != nil {
		t.Fatal(err)
	}
	snd := NewSender(api, WithContentBasedDeduplication())
	env := publish(t, snd, name, map[string]any{"n": 1})
	in, err := snd.Input(&driver.Message{Envelope: env, Body: []byte("{}"), Queue: name})
	if err != nil || in.MessageDeduplicationId != nil {
		t.Fatalf("MessageDeduplicationId = %v (%v), want none", in.MessageDeduplicationId, err)
	}
	body, _ := env.Encode()
	if err := snd.Send(context.Background(), []*driver.Message{{Envelope: env, Body: body, Queue: name}}); err != nil {
		t.Fatal(err)
	}
	r := newTestReceiver(t, name)
	defer r.Close(context.Background())
	var n int
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		ds, _ := r.Receive(context.Background(), 10)
		for _, d := range ds {
			n++
			_ = r.Ack(context.Background(), d)
		}
	}
	if n != 1 {
		t.Fatalf("%d messages received, want 1: the identical second publish is deduplicated by content", n)
	}
}

// TestFaults runs the shared fault suite on the local SQS server.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite is long")
	}
	needServer(t)
	drivertest.RunFaults(t, faultHarness(t))
}

// TestFaultsServerRestart kills (SIGKILL) a local SQS server of its own,
// which persists to SQLite, mid-consume and starts it again on its data.
// Only this scenario runs there: fauxqs's persistent mode loses messages
// whose visibility is changed (MessageNotInflight), which the in-memory
// server of TestFaults does not.
func TestFaultsServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite is long")
	}
	needServer(t)
	if os.Getenv(EnvEndpoint) != "" {
		t.Skip("the server named by " + EnvEndpoint + " cannot be restarted here")
	}
	port, err := drivertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	data, saved := t.TempDir(), endpoint
	t.Cleanup(func() { endpoint = saved })
	server := drivertest.StartRestartable(t, func() (*exec.Cmd, error) {
		cmd, url, err := launchFauxqs(port, data)
		endpoint = url
		return cmd, err
	})
	h := faultHarness(t)
	h.Scenarios = []string{"broker-killed"}
	h.KillBroker, h.StartBroker = server.Hooks()
	drivertest.RunFaults(t, h)
}

func faultHarness(t *testing.T) drivertest.FaultHarness {
	snd := NewSender(client(t))
	return drivertest.FaultHarness{
		Harness: drivertest.Harness{
			NewQueue: func(t *testing.T) string { return newQueue(t, false) },
			Sender:   func(*testing.T) driver.Sender { return snd },
			Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
				r := newTestReceiver(t, q)
				return r, func() { _ = r.Close(context.Background()) }
			},
			Timeout: 90 * time.Second,
		},
		Module:          "sqs",
		Server:          "fauxqs",
		MaxMessageBytes: MaxMessageSize - 4096,
		MissingDeadLetterQueue: func(t *testing.T) string {
			q := newQueue(t, false)
			if _, err := client(t).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL(t, q+".dlq"))}); err != nil {
				t.Fatal(err)
			}
			return q
		},
	}
}

// As reaches the native types: the *sqs.Client of a Sender or Receiver and
// a delivery's types.Message.
func TestAs(t *testing.T) {
	q := newQueue(t, false)
	api := client(t)
	snd := NewSender(api)
	var c *awssqs.Client
	if !snd.As(&c) || c != api {
		t.Error("Sender.As(**sqs.Client) failed")
	}
	publish(t, snd, q, nil)
	r := newTestReceiver(t, q)
	defer r.Close(context.Background())
	var rapi ReceiverAPI
	if !r.As(&rapi) || rapi == nil {
		t.Error("Receiver.As(*ReceiverAPI) failed")
	}
	ds, err := r.Receive(context.Background(), 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %d", err, len(ds))
	}
	var m types.Message
	if !ds[0].As(&m) || aws.ToString(m.MessageId) == "" || aws.ToString(m.MessageId) != ds[0].Position {
		t.Errorf("Delivery.As(*types.Message) = %+v", m)
	}
	var wrong *int
	if ds[0].As(&wrong) || snd.As(&wrong) {
		t.Error("As took a wrong type")
	}
	if err := snd.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(context.Background(), []*driver.Message{{Body: []byte("{}"), Queue: q}}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
}
