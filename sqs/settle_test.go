package sqs

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"slices"
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
				if !errors.Is(err, ErrDelayUnsupported) || !errors.Is(err, driver.ErrRejected) {
					t.Fatalf("err = %v, want ErrDelayUnsupported, a driver.ErrRejected", err)
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
	var runs, reported atomic.Int32
	stop := drivertest.StartConsumer(t, r, snd, testURN, func(context.Context, *queue.Message) error {
		runs.Add(1)
		return errors.New("fails")
	}, queue.WithRetryMode(queue.RetryRepublish), queue.WithBackoff(queue.Constant(20*time.Minute)),
		queue.WithErrorHandler(func(err error) { reported.Add(1); t.Logf("reported: %v", err) }))
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
	if n := reported.Load(); n != 0 {
		t.Errorf("%d errors reported; a retry kept natively is no settlement failure", n)
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

// visibilityAPI records the visibility timeouts a Receiver asks for.
type visibilityAPI struct {
	ReceiverAPI
	mu       sync.Mutex
	secs     []int32  // ChangeMessageVisibility's timeouts
	extended []string // the receipt handles the heartbeat extended
}

func (v *visibilityAPI) GetQueueUrl(context.Context, *awssqs.GetQueueUrlInput, ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("http://127.0.0.1:1/q")}, nil
}

func (v *visibilityAPI) ChangeMessageVisibilityBatch(_ context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, _ ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range in.Entries {
		v.extended = append(v.extended, aws.ToString(e.ReceiptHandle))
	}
	return &awssqs.ChangeMessageVisibilityBatchOutput{}, nil
}

func (v *visibilityAPI) ChangeMessageVisibility(_ context.Context, in *awssqs.ChangeMessageVisibilityInput, _ ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.secs = append(v.secs, in.VisibilityTimeout)
	return &awssqs.ChangeMessageVisibilityOutput{}, nil
}

// SQS keeps a message invisible at most 12 hours from its receipt and
// refuses a longer timeout: a release three hours after the receipt asks
// for at most the nine hours left. Before, it asked for 12 hours whatever
// the time since, and SQS refused the release.
func TestReleaseKeepsWithinTwelveHoursOfReceipt(t *testing.T) {
	api := &visibilityAPI{}
	r := NewReceiver(api, "q")
	defer r.Close(context.Background())
	for _, c := range []struct {
		ago, delay time.Duration
		want       int32
		cut        bool
	}{
		{0, 5 * time.Second, 5, false},
		{0, 1500 * time.Millisecond, 2, false},
		{0, 13 * time.Hour, 12 * 3600, true},
		{3 * time.Hour, 12 * time.Hour, 9 * 3600, true},
		{3 * time.Hour, 8 * time.Hour, 8 * 3600, false},
		{13 * time.Hour, time.Minute, 0, true},
	} {
		d := r.deliveries([]types.Message{{ReceiptHandle: aws.String("h"), Body: aws.String("{}")}})[0]
		d.Token.(*token).received = time.Now().Add(-c.ago)
		if err := r.Release(context.Background(), d, c.delay); err != nil {
			t.Fatal(err)
		}
		api.mu.Lock()
		got := api.secs[len(api.secs)-1]
		api.mu.Unlock()
		// The time since the receipt runs on while the test does: a cut
		// delay has a second's slack.
		if got != c.want && (!c.cut || got != max(c.want-1, 0)) {
			t.Errorf("received %v ago, delay %v: visibility timeout %ds, want %ds", c.ago, c.delay, got, c.want)
		}
	}
}

// The heartbeat stops extending a message whose next extension would end
// past 12 hours from its receipt, which SQS refuses, whatever
// WithMaxExtension says.
func TestHeartbeatStopsWithinTwelveHoursOfReceipt(t *testing.T) {
	api := &visibilityAPI{}
	r := NewReceiver(api, "q", WithMaxExtension(24*time.Hour))
	defer r.Close(context.Background())
	for handle, ago := range map[string]time.Duration{"young": time.Hour, "old": 12*time.Hour - 10*time.Second} {
		d := r.deliveries([]types.Message{{ReceiptHandle: aws.String(handle), Body: aws.String("{}")}})[0]
		d.Token.(*token).received = time.Now().Add(-ago)
	}
	r.extend()
	api.mu.Lock()
	defer api.mu.Unlock()
	if !slices.Equal(api.extended, []string{"young"}) {
		t.Errorf("the heartbeat extended %v, want [young]: the old one's extension would end past 12h from its receipt", api.extended)
	}
}

// A visibility timeout of zero or less keeps the default, and one below a
// second is a second: before, zero started the heartbeat with a zero
// interval, which panicked (time.NewTicker), and a message would have been
// visible again at once.
func TestBadVisibilityTimeoutKeepsTheDefault(t *testing.T) {
	for d, want := range map[time.Duration]time.Duration{0: 30 * time.Second, -time.Second: 30 * time.Second, 500 * time.Millisecond: time.Second} {
		r := NewReceiver(&visibilityAPI{}, "q", WithVisibilityTimeout(d), WithWaitTime(-time.Second))
		if r.cfg.visibility != want || r.cfg.heartbeat <= 0 || r.cfg.wait != 20*time.Second {
			t.Errorf("WithVisibilityTimeout(%v): visibility %v, heartbeat %v, wait %v; want visibility %v", d, r.cfg.visibility, r.cfg.heartbeat, r.cfg.wait, want)
		}
		_ = r.Close(context.Background())
	}
}
