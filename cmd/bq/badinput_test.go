package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

// oneLine checks that bad input gets exit status want and a single "bq:"
// line naming what is wrong.
func oneLine(t *testing.T, want int, mention string, args ...string) {
	t.Helper()
	out, errOut, code := bq(t, args...)
	line := strings.TrimSpace(errOut)
	if code != want || strings.Count(line, "\n") != 0 || !strings.HasPrefix(line, "bq: ") || !strings.Contains(line, mention) {
		t.Errorf("bq %s: exit %d (want %d), stderr %q (want one line naming %q), stdout %q", strings.Join(args, " "), code, want, errOut, mention, out)
	}
}

func TestBadInput(t *testing.T) {
	oneLine(t, exitUsage, "not a queue URL", "peek", "orders.dlq")
	oneLine(t, exitUsage, `unknown scheme "amqp"`, "peek", "amqp://127.0.0.1/orders.dlq")
	oneLine(t, exitUsage, "no queue or topic", "count", "kafka://127.0.0.1:9092")
	oneLine(t, exitUsage, "not host:port", "count", "kafka://127.0.0.1:nine/orders")
	oneLine(t, exitUsage, "no host", "count", "kafka:///orders")
	oneLine(t, exitUsage, "--since", "count", "kafka://"+kafkaAddr+"/x", "--since", "yesterday")
	oneLine(t, exitUsage, "--urn", "count", "kafka://"+kafkaAddr+"/x", "--urn", "[")
	oneLine(t, exitUsage, "--yes", "purge", "kafka://"+kafkaAddr+"/x")
	oneLine(t, exitUsage, "unexpected argument", "peek", "kafka://"+kafkaAddr+"/x", "extra")
	oneLine(t, exitUsage, "--limit", "peek", "kafka://"+kafkaAddr+"/x", "--limit", "-1")

	// A topic that does not exist, a broker that is not there.
	missing := fmt.Sprintf("bq-cli-missing-%d", time.Now().UnixNano())
	oneLine(t, exitFailed, missing, "count", "kafka://"+kafkaAddr+"/"+missing)
	oneLine(t, exitFailed, "127.0.0.1:1", "count", "kafka://127.0.0.1:1/orders.dlq", "--timeout", "2s")
	if sqsAddr != "" {
		oneLine(t, exitFailed, missing, "count", "sqs://"+sqsAddr+"/"+missing)
	}

	// Help is not an error.
	if out, _, code := bq(t, "--help"); code != 0 || !strings.Contains(out, "redrive") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

// A message that is neither an envelope nor a poison copy is shown raw by
// peek, and refused by redrive with an error naming it: nothing is sent and
// nothing deleted, and the exit status says so.
func TestNotAnEnvelope(t *testing.T) {
	orig := fmt.Sprintf("bq-cli-junk-%d", time.Now().UnixNano())
	createTopics(t, orig, orig+".dlq")
	dlqURL := "kafka://" + kafkaAddr + "/" + orig + ".dlq"
	send(t, dlqURL, &driver.Message{Body: []byte("hello, not json"), Queue: orig + ".dlq"})
	if out := mustBQ(t, "peek", dlqURL); !strings.Contains(out, "not an envelope") || !strings.Contains(out, "hello, not json") {
		t.Errorf("peek:\n%s", out)
	}
	out, _, code := bq(t, "redrive", dlqURL)
	if code != exitFailed || !strings.Contains(out, "not a BabelQueue envelope") {
		t.Errorf("redrive of junk: exit %d\n%s", code, out)
	}
	if n := count(t, dlqURL); n != 1 {
		t.Errorf("count after the refused redrive: %d, want 1", n)
	}
	if back := drain(t, "kafka://"+kafkaAddr+"/"+orig+"?group=verify"); len(back) != 0 {
		t.Errorf("the refused redrive sent %d messages", len(back))
	}
}

// Ctrl-C in the middle of a redrive stops between messages: every message
// is either back on its queue or still in the dead-letter queue, none in
// both, and the next run finishes the rest.
func TestInterruptedRedrive(t *testing.T) {
	const n = 300
	orig := fmt.Sprintf("bq-cli-ctrlc-%d", time.Now().UnixNano())
	createTopics(t, orig, orig+".dlq")
	dlqURL := "kafka://" + kafkaAddr + "/" + orig + ".dlq"
	var msgs []*driver.Message
	for i := range n {
		msgs = append(msgs, deadLetter(t, urnA, orig, i, core.ReasonFailed))
	}
	ep := openURL(t, dlqURL)
	if err := ep.snd.Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	ep.close(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb drivertest.SyncBuffer
	go func() {
		for !strings.Contains(out.String(), "redriven to") {
			time.Sleep(time.Millisecond)
		}
		cancel() // Ctrl-C
	}()
	code := run(ctx, []string{"redrive", dlqURL}, &out, &errb)
	if code != exitInterrupted || !strings.Contains(errb.String(), "interrupted") {
		t.Fatalf("interrupted redrive: exit %d\n%s", code, errb.String())
	}
	first := strings.Count(out.String(), "redriven to")
	if first == 0 || first == n {
		t.Fatalf("the interrupt came at %d of %d; the test wants it in between", first, n)
	}
	if left := count(t, dlqURL); left != n-first {
		t.Fatalf("%d redriven, %d left in the DLQ, want %d", first, left, n-first)
	}
	mustBQ(t, "redrive", dlqURL)
	back := drain(t, "kafka://"+kafkaAddr+"/"+orig+"?group=verify")
	ids := map[string]int{}
	for _, d := range back {
		env, err := core.Decode(d.Body)
		if err != nil {
			t.Fatal(err)
		}
		ids[env.Meta.ID]++
	}
	if len(back) != n || len(ids) != n {
		t.Errorf("%d messages back, %d distinct, want %d of each (nothing lost, nothing twice)", len(back), len(ids), n)
	}
	if left := count(t, dlqURL); left != 0 {
		t.Errorf("%d left in the DLQ after the second run", left)
	}
}
