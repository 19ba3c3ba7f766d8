package benchmarks

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue/transports/core/queue"
	bqsqs "github.com/babelqueue/transports/sqs"
)

// sqsPeer is one way of using SQS from Go. Watermill's SQS module is not
// served by the module proxy here, so the rows compare this project with
// the AWS SDK alone.
type sqsPeer struct {
	name      string
	publisher func(tb testing.TB, api *awssqs.Client) publisher
	consume   func(tb testing.TB, api *awssqs.Client, queueName string, handlers int, seen func(sent string)) (stop func())
}

var sqsPeers = []sqsPeer{
	{"babelqueue", newBQSQSPublisher, consumeBQSQS},
	{"aws-sdk-go-v2", newRawSQSPublisher, consumeRawSQS},
}

func sqsClient(tb testing.TB) *awssqs.Client {
	tb.Helper()
	if sqsEndpoint == "" {
		tb.Skip(EnvSQSEndpoint + " is unset: no SQS server (scripts/sqs-server.sh start)")
	}
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(sqsEndpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, bqsqs.SafeRequestBodies) // both peers' client: see its documentation
}

// createQueue creates a fresh queue and returns its name and URL.
func createQueue(tb testing.TB, api *awssqs.Client) (string, string) {
	tb.Helper()
	name := freshName("peers")
	out, err := api.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		tb.Fatalf("create queue %s: %v", name, err)
	}
	return name, aws.ToString(out.QueueUrl)
}

// --- this project ---

func newBQSQSPublisher(_ testing.TB, api *awssqs.Client) publisher {
	return bqPublisher{queue.NewPublisher(bqsqs.NewSender(api, bqsqs.WithLogger(discard())), queue.WithPublisherLogger(discard()))}
}

func consumeBQSQS(tb testing.TB, api *awssqs.Client, q string, handlers int, seen func(string)) func() {
	rcv := bqsqs.NewReceiver(api, q, bqsqs.WithLogger(discard()), bqsqs.WithWaitTime(time.Second))
	// A batch of 10 per handler: the receiver runs that many long polls at
	// once, as the raw loop runs one per handler.
	c := queue.NewConsumer(rcv, bqsqs.NewSender(api, bqsqs.WithLogger(discard())),
		queue.WithConcurrency(handlers), queue.WithBatchSize(10*handlers), queue.WithLogger(discard()))
	return runConsumer(tb, c, seen, rcv.Close)
}

// --- the AWS SDK, sending this project's encoded envelopes and attributes ---

type rawSQSPublisher struct {
	api      *awssqs.Client
	template *awssqs.SendMessageInput
	mu       sync.Mutex
	urls     map[string]string
}

func newRawSQSPublisher(tb testing.TB, api *awssqs.Client) publisher {
	in, err := bqsqs.NewSender(api).Input(encodedMessage(tb, "q"))
	if err != nil {
		tb.Fatal(err)
	}
	return &rawSQSPublisher{api: api, template: in, urls: map[string]string{}}
}

func (p *rawSQSPublisher) url(ctx context.Context, q string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.urls[q]; ok {
		return u, nil
	}
	out, err := p.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		return "", err
	}
	p.urls[q] = aws.ToString(out.QueueUrl)
	return p.urls[q], nil
}

func (p *rawSQSPublisher) attributes(m msg) map[string]types.MessageAttributeValue {
	if !m.stamp {
		return p.template.MessageAttributes
	}
	attrs := make(map[string]types.MessageAttributeValue, len(p.template.MessageAttributes)+1)
	for k, v := range p.template.MessageAttributes {
		attrs[k] = v
	}
	attrs[headerSent] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(sentHeader())}
	return attrs
}

func (p *rawSQSPublisher) publish(ctx context.Context, q string, m msg) error {
	u, err := p.url(ctx, q)
	if err != nil {
		return err
	}
	_, err = p.api.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: p.template.MessageBody, MessageAttributes: p.attributes(m)})
	return err
}

func (p *rawSQSPublisher) prepareBatch(q string, ms []msg) (func(context.Context) error, error) {
	var chunks [][]types.SendMessageBatchRequestEntry
	for start := 0; start < len(ms); start += 10 {
		chunk := ms[start:min(start+10, len(ms))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: p.template.MessageBody, MessageAttributes: p.attributes(m)}
		}
		chunks = append(chunks, entries)
	}
	return func(ctx context.Context) error {
		u, err := p.url(ctx, q)
		if err != nil {
			return err
		}
		for _, entries := range chunks {
			out, err := p.api.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: entries})
			if err != nil {
				return err
			}
			if len(out.Failed) > 0 {
				return errors.New(aws.ToString(out.Failed[0].Message))
			}
		}
		return nil
	}, nil
}

// consumeRawSQS is the loop an SDK user writes, once per handler: long-poll
// ten messages, handle them, delete them in one batch.
func consumeRawSQS(tb testing.TB, api *awssqs.Client, q string, handlers int, seen func(string)) func() {
	ctx, cancel := context.WithCancel(context.Background())
	out, err := api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		tb.Fatal(err)
	}
	u := out.QueueUrl
	var wg sync.WaitGroup
	for range handlers {
		wg.Go(func() {
			for ctx.Err() == nil {
				got, err := api.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: u, MaxNumberOfMessages: 10,
					WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
				if err != nil || len(got.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(got.Messages))
				for i, m := range got.Messages {
					sent := ""
					if a, ok := m.MessageAttributes[headerSent]; ok {
						sent = aws.ToString(a.StringValue)
					}
					seen(sent)
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				del, err := api.DeleteMessageBatch(context.WithoutCancel(ctx), &awssqs.DeleteMessageBatchInput{QueueUrl: u, Entries: entries})
				if err != nil {
					tb.Errorf("DeleteMessageBatch: %v", err)
				} else if len(del.Failed) > 0 {
					tb.Errorf("DeleteMessageBatch: %d failed: %s", len(del.Failed), aws.ToString(del.Failed[0].Message))
				}
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// --- the rows ---

type sqsRow struct {
	name string
	run  func(b bench, api *awssqs.Client, p sqsPeer, m *metrics)
}

var sqsRows = []sqsRow{
	{"sync-publish", sqsSyncPublish},
	{"publishers=8", sqsConcurrentPublish},
	{"batch=10000", func(b bench, api *awssqs.Client, p sqsPeer, m *metrics) { sqsBatchPublish(b, api, p, m, false) }},
	{"batch=10000/prebuilt", func(b bench, api *awssqs.Client, p sqsPeer, m *metrics) { sqsBatchPublish(b, api, p, m, true) }},
	{"consume=10000/handlers=1", func(b bench, api *awssqs.Client, p sqsPeer, m *metrics) { sqsConsume(b, api, p, m, 1) }},
	{"consume=10000/handlers=8", func(b bench, api *awssqs.Client, p sqsPeer, m *metrics) { sqsConsume(b, api, p, m, 8) }},
	{"latency", sqsLatency},
}

// BenchmarkSQS runs every row for both implementations against the local
// SQS server: BenchmarkSQS/fauxqs/<row>/<implementation>.
func BenchmarkSQS(b *testing.B) {
	api := sqsClient(b)
	b.Run("fauxqs", func(b *testing.B) {
		warmUp(b, "sqs", func() {
			for _, row := range sqsRows {
				for _, p := range sqsPeers {
					row.run(b, api, p, &metrics{})
				}
			}
		})
		for _, row := range sqsRows {
			b.Run(row.name, func(b *testing.B) {
				for _, p := range sqsPeers {
					b.Run(p.name, func(b *testing.B) {
						var m metrics
						for range b.N {
							row.run(b, api, p, &m)
						}
						m.report(b)
					})
				}
			})
		}
		for _, row := range sqsTurnRows {
			b.Run(row.name, func(b *testing.B) {
				ms := row.run(b, api)
				for i, p := range sqsPeers {
					b.Run(p.name, func(b *testing.B) { ms[i].report(b) })
				}
			})
		}
	})
}

// sqsTurnRows are the rows whose implementations take turns in the same
// run, each returning the metrics of every one of sqsPeers.
var sqsTurnRows = []struct {
	name string
	run  func(b bench, api *awssqs.Client) []metrics
}{
	{"sync-publish/interleaved", func(b bench, api *awssqs.Client) []metrics { return sqsInterleaved(b, api) }},
	{"consume=10000/handlers=1/interleaved", func(b bench, api *awssqs.Client) []metrics { return sqsConsumeInTurns(b, api, 1) }},
	{"consume=10000/handlers=8/interleaved", func(b bench, api *awssqs.Client) []metrics { return sqsConsumeInTurns(b, api, 8) }},
}

// sqsConsumeInTurns is consume=10000 with both implementations taking
// turns (inTurns), load.versus consumes each, each of messages it
// published ahead to a queue of its own.
func sqsConsumeInTurns(b bench, api *awssqs.Client, handlers int) []metrics {
	ms := make([]metrics, len(sqsPeers))
	inTurns(load.versus, len(sqsPeers), func(_, i int) { sqsConsume(b, api, sqsPeers[i], &ms[i], handlers) })
	return ms
}

// sqsInterleaved is sync-publish with both implementations publishing in
// turn to the same queue (see measureInterleaved).
func sqsInterleaved(tb testing.TB, api *awssqs.Client) []metrics {
	q, _ := createQueue(tb, api)
	pubs := make([]publisher, len(sqsPeers))
	for i, p := range sqsPeers {
		pubs[i] = p.publisher(tb, api)
	}
	return measureInterleaved(tb, q, pubs)
}

func sqsSyncPublish(b bench, api *awssqs.Client, p sqsPeer, m *metrics) {
	b.StopTimer()
	q, _ := createQueue(b, api)
	measureSyncPublish(b, q, p.publisher(b, api), m)
}

func sqsConcurrentPublish(b bench, api *awssqs.Client, p sqsPeer, m *metrics) {
	b.StopTimer()
	q, _ := createQueue(b, api)
	measureConcurrentPublish(b, q, p.publisher(b, api), m)
}

func sqsBatchPublish(b bench, api *awssqs.Client, p sqsPeer, m *metrics, prebuilt bool) {
	b.StopTimer()
	q, _ := createQueue(b, api)
	measureBatchPublish(b, q, p.publisher(b, api), m, prebuilt)
}

// sqsConsume publishes load.consume ahead, then consumes them: msgs/s is the
// steady rate, handled-ms runs from the consumer's start to all handled and
// committed-ms to the queue empty of them (every message deleted).
func sqsConsume(b bench, api *awssqs.Client, p sqsPeer, m *metrics, handlers int) {
	b.StopTimer()
	q, u := createQueue(b, api)
	if err := publishBatch(context.Background(), p.publisher(b, api), q, msgs(load.consume, 0)); err != nil {
		b.Fatal(err)
	}
	measureConsume(b, p.name, m,
		func(seen func(string)) func() { return p.consume(b, api, q, handlers, seen) },
		func() bool { return sqsDrained(api, u) })
}

// sqsDrained reports whether the queue holds no message, visible or not.
func sqsDrained(api *awssqs.Client, url string) bool {
	out, err := api.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return false
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
		out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0"
}

func sqsLatency(b bench, api *awssqs.Client, p sqsPeer, m *metrics) {
	b.StopTimer()
	q, _ := createQueue(b, api)
	pub := p.publisher(b, api)
	lat := newTally(load.latency, 0)
	stop := p.consume(b, api, q, 1, func(sent string) {
		if sent != "" {
			lat.seen(sent)
		}
	})
	defer stop()
	measureLatency(b, q, pub, lat, m)
}

// TestSQSRows runs every SQS row of both implementations once on a small
// workload when BQ_SQS_ENDPOINT names a server.
func TestSQSRows(t *testing.T) {
	api := sqsClient(t)
	defer func(w workload) { load = w }(load)
	load = small
	for _, row := range sqsTurnRows {
		t.Run(row.name, func(t *testing.T) {
			for i, m := range row.run(untimed{t}, api) {
				checkMetrics(t, sqsPeers[i].name, m)
			}
		})
	}
	for _, row := range sqsRows {
		for _, p := range sqsPeers {
			t.Run(row.name+"/"+p.name, func(t *testing.T) {
				var m metrics
				row.run(untimed{t}, api, p, &m)
				checkMetrics(t, p.name, m)
			})
		}
	}
}
