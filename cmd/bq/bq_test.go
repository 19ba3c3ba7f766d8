package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
	"github.com/babelqueue/transports/core/queue"
)

const (
	urnA = "urn:babel:orders:created"
	urnB = "urn:babel:orders:cancelled"
)

var queueNo atomic.Int64

// bq runs the command line in-process.
func bq(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// mustBQ runs the command line and fails the test unless it exits 0.
func mustBQ(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := bq(t, args...)
	if code != 0 {
		t.Fatalf("bq %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// broker is one of the four, for the shared scenario.
type broker struct {
	scheme, addr, why string
	// create makes the queues (Kafka topics, SQS queues); Pulsar and the
	// Service Bus test server create them on first use.
	create func(t *testing.T, names ...string)
	// query is added to every URL the scenario uses to read a queue back.
	query func(n int) string
	// wait is --wait for the settling commands: on Service Bus, what a
	// filtered run skipped stays locked until the lock expires (5s here).
	wait string
}

func (b broker) url(q string) string { return b.scheme + "://" + b.addr + "/" + q }

func brokers() []broker {
	return []broker{
		{scheme: "kafka", addr: kafkaAddr, create: createTopics, query: func(n int) string { return fmt.Sprintf("?group=verify-%d", n) }},
		{scheme: "sqs", addr: sqsAddr, why: sqsWhy, create: createSQSQueues},
		{scheme: "pulsar", addr: pulsarAddr, why: "no Pulsar broker: run scripts/pulsar-server.sh start and set BQ_PULSAR_URL=pulsar://127.0.0.1:16650",
			query: func(n int) string { return fmt.Sprintf("?subscription=verify-%d", n) }},
		{scheme: "sb", addr: sbAddr, why: sbWhy, wait: "7s"},
	}
}

func createTopics(t *testing.T, names ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, 1, nil, names...); err != nil {
		t.Fatal(err)
	}
}

func createSQSQueues(t *testing.T, names ...string) {
	t.Helper()
	api := awssqs.New(awssqs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + sqsAddr),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	for _, n := range names {
		if _, err := api.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(n)}); err != nil {
			t.Fatal(err)
		}
	}
}

func openURL(t *testing.T, raw string) *endpoint {
	t.Helper()
	tg, err := parseTarget(raw)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := open(context.Background(), tg, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// deadLetter returns the dead-letter copy of a message of urn that failed
// on queue orig.
func deadLetter(t *testing.T, urn, orig string, i int, reason core.Reason) *driver.Message {
	t.Helper()
	env, err := core.New(urn, map[string]any{"i": i}, core.WithQueue(orig))
	if err != nil {
		t.Fatal(err)
	}
	dl := core.NewDeadLetter(reason, errors.New("payment service down"), orig, 3, time.Now())
	cp := env.WithAttempts(3).DeadLettered(dl)
	body, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &driver.Message{Envelope: cp, Body: body, Queue: orig + ".dlq", DeadLetter: &dl,
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
}

func send(t *testing.T, dlqURL string, msgs ...*driver.Message) {
	t.Helper()
	ep := openURL(t, dlqURL)
	defer ep.close(context.Background())
	for _, m := range msgs { // one at a time: the order is the scenario's
		if err := ep.snd.Send(context.Background(), []*driver.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
}

// drain reads a queue until it is quiet for 2s and removes what it read.
func drain(t *testing.T, raw string) []*driver.Delivery {
	t.Helper()
	ep := openURL(t, raw)
	defer ep.close(context.Background())
	var out []*driver.Delivery
	last := time.Now()
	for time.Since(last) < 2*time.Second {
		ds, err := ep.rcv.Receive(context.Background(), 64)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			last = time.Now()
			out = append(out, d)
			if err := ep.rcv.Ack(context.Background(), d); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

type jsonSummary struct {
	Summary struct {
		Received, Matched, Done, Failed int
		Interrupted                     bool
	}
}

func lastSummary(t *testing.T, out string) jsonSummary {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s jsonSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("last line is not a summary: %v\n%s", err, out)
	}
	return s
}

func count(t *testing.T, raw string, args ...string) int {
	t.Helper()
	out := mustBQ(t, append([]string{"count", raw, "--json"}, args...)...)
	return lastSummary(t, out).Summary.Matched
}

// The whole life of a dead-letter queue, on every broker: count and peek
// change nothing, a dry run sends nothing, redrive and replay send each
// message to its original queue (dead_letter removed, attempts 0, the
// replay marked) and only then remove it, a poison copy goes back byte for
// byte, and purge deletes.
func TestDeadLetterQueueLife(t *testing.T) {
	for _, b := range brokers() {
		t.Run(b.scheme, func(t *testing.T) {
			t.Parallel()
			if b.addr == "" {
				drivertest.NoServer(t, b.why)
			}
			orig := fmt.Sprintf("bq-cli-%s-%d-%d", b.scheme, time.Now().UnixNano()%1e6, queueNo.Add(1))
			dlq := orig + ".dlq"
			if b.create != nil {
				b.create(t, orig, dlq)
			}
			// One reader of the original queue for the whole test: a new
			// Kafka group or Pulsar subscription would read it from the start.
			verify := ""
			if b.query != nil {
				verify = b.query(int(queueNo.Add(1)))
			}
			q := func() string { return verify }
			dlqURL := b.url(dlq)
			wait := b.wait
			if wait == "" {
				wait = "2s"
			}
			poison := []byte(`{"job": broken`)
			var msgs []*driver.Message
			for i := range 3 {
				msgs = append(msgs, deadLetter(t, urnA, orig, i, core.ReasonFailed))
			}
			for i := range 2 {
				msgs = append(msgs, deadLetter(t, urnB, orig, 10+i, core.ReasonUnknownURN))
			}
			pdl := core.NewDeadLetter(core.ReasonPoison, errors.New("invalid JSON"), orig, 0, time.Now())
			msgs = append(msgs, &driver.Message{Body: poison, Queue: dlq, DeadLetter: &pdl})
			send(t, dlqURL, msgs...)

			// count and peek settle nothing.
			if n := count(t, dlqURL); n != 6 {
				t.Fatalf("count: %d, want 6", n)
			}
			if n := count(t, dlqURL, "--urn", "urn:babel:orders:c*ted"); n != 3 {
				t.Errorf("count --urn: %d, want 3", n)
			}
			if n := count(t, dlqURL, "--reason", "poison"); n != 1 {
				t.Errorf("count --reason poison: %d, want 1", n)
			}
			if n := count(t, dlqURL, "--since", "1h"); n != 5 { // a poison copy has no failed_at
				t.Errorf("count --since 1h: %d, want 5", n)
			}
			if n := count(t, dlqURL, "--until", "1h"); n != 0 {
				t.Errorf("count --until 1h: %d, want 0", n)
			}
			out := mustBQ(t, "peek", dlqURL, "--json")
			var recs []record
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var r record
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				if r.Position != "" || r.URN != "" || r.Raw != "" {
					recs = append(recs, r)
				}
			}
			if len(recs) != 6 {
				t.Fatalf("peek --json: %d records, want 6:\n%s", len(recs), out)
			}
			var sawPoison bool
			for _, r := range recs {
				if r.Poison {
					sawPoison = true
					if r.Raw != rawText(poison) {
						t.Errorf("poison shown as %q, want the raw bytes %q", r.Raw, rawText(poison))
					}
				} else if r.Reason == "" || r.Error != "payment service down" || r.OriginalQueue != orig || r.FailedAt == nil {
					t.Errorf("peek record %+v", r)
				}
			}
			if !sawPoison {
				t.Error("peek did not show the poison copy")
			}
			text := mustBQ(t, "peek", dlqURL, "--limit", "1")
			if !strings.Contains(text, urnA) || !strings.Contains(text, "payment service down") {
				t.Errorf("peek text:\n%s", text)
			}

			// A dry run sends and settles nothing.
			out = mustBQ(t, "redrive", dlqURL, "--dry-run")
			if strings.Count(out, "would send to "+orig) != 6 {
				t.Errorf("redrive --dry-run:\n%s", out)
			}
			if n := count(t, dlqURL); n != 6 {
				t.Fatalf("count after the dry run: %d, want 6", n)
			}

			// Redrive the three of urn A.
			out = mustBQ(t, "redrive", dlqURL, "--urn", urnA, "--json", "--wait", wait)
			if s := lastSummary(t, out).Summary; s.Done != 3 || s.Failed != 0 {
				t.Fatalf("redrive --urn: %+v\n%s", s, out)
			}
			back := drain(t, b.url(orig)+q())
			if len(back) != 3 {
				t.Fatalf("%d messages back on %s, want 3", len(back), orig)
			}
			for _, d := range back {
				env, err := core.Decode(d.Body)
				if err != nil {
					t.Fatal(err)
				}
				if env.URN != urnA || env.Attempts != 0 || env.DeadLetter != nil || env.Meta.Queue != orig {
					t.Errorf("redriven %s attempts %d dead_letter %v queue %s", env.URN, env.Attempts, env.DeadLetter, env.Meta.Queue)
				}
				if d.Headers[queue.HeaderReplay] != "" {
					t.Error("a redrive carries the replay marker")
				}
				if !strings.HasPrefix(d.Headers["traceparent"], "00-0af7651916cd43dd8448eb211c80319c") {
					t.Errorf("traceparent %q not carried over", d.Headers["traceparent"])
				}
			}
			if n := count(t, dlqURL); n != 3 {
				t.Fatalf("count after the redrive: %d, want 3", n)
			}

			// Replay the two of urn B: marked.
			out = mustBQ(t, "replay", dlqURL, "--reason", "unknown_urn", "--wait", wait)
			if !strings.Contains(out, "replayed to "+orig) {
				t.Errorf("replay:\n%s", out)
			}
			back = drain(t, b.url(orig)+q())
			if len(back) != 2 {
				t.Fatalf("%d replayed messages back, want 2", len(back))
			}
			for _, d := range back {
				if d.Headers[queue.HeaderReplay] != "1" {
					t.Errorf("replayed message without %s: %v", queue.HeaderReplay, d.Headers)
				}
			}

			// The poison copy goes back byte for byte.
			mustBQ(t, "redrive", dlqURL, "--reason", "poison", "--wait", wait)
			back = drain(t, b.url(orig)+q())
			if len(back) != 1 || !bytes.Equal(back[0].Body, poison) {
				t.Fatalf("poison redrive: %d messages, body %q, want %q", len(back), firstBody(back), poison)
			}
			if n := count(t, dlqURL); n != 0 {
				t.Fatalf("count after redriving everything: %d, want 0", n)
			}

			// Purge needs --yes, and then deletes.
			send(t, dlqURL, deadLetter(t, urnA, orig, 20, core.ReasonFailed), deadLetter(t, urnA, orig, 21, core.ReasonFailed))
			if _, errOut, code := bq(t, "purge", dlqURL); code != exitUsage || !strings.Contains(errOut, "--yes") {
				t.Errorf("purge without --yes: exit %d, %q", code, errOut)
			}
			out = mustBQ(t, "purge", dlqURL, "--yes", "--limit", "1", "--wait", wait)
			if !strings.Contains(out, "deleted") {
				t.Errorf("purge:\n%s", out)
			}
			if n := count(t, dlqURL); n != 1 {
				t.Fatalf("count after purging 1 of 2: %d", n)
			}
			mustBQ(t, "purge", dlqURL, "--yes", "--wait", wait)
			if n := count(t, dlqURL); n != 0 {
				t.Fatalf("count after purge: %d", n)
			}
			if back := drain(t, b.url(orig)+q()); len(back) != 0 {
				t.Errorf("purge sent %d messages", len(back))
			}
		})
	}
}

func firstBody(ds []*driver.Delivery) []byte {
	if len(ds) == 0 {
		return nil
	}
	return ds[0].Body
}
