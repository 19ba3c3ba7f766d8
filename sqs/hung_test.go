package sqs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

// hangFirstProxy is a TCP proxy in front of the SQS server whose first
// connection hangs: it reads what it is sent and never answers, as a
// connection to a peer that went away without a reset does. Later
// connections are forwarded.
func hangFirstProxy(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	serve := func(fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	serve(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			if first {
				serve(func() { _, _ = io.Copy(io.Discard, c) })
				continue
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			track(up)
			serve(func() { _, _ = io.Copy(up, c); up.Close() })
			serve(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
	return "http://" + ln.Addr().String()
}

// TestHungPoll: a ReceiveMessage on a connection that never answers gives
// up pollSlack after its wait time with an error saying so, instead of
// stalling the consumer until Close, and the next Receive, on a new
// connection, gets the message.
func TestHungPoll(t *testing.T) {
	q := newQueue(t, false)
	api := client(t)
	if err := NewSender(api).Send(context.Background(), []*driver.Message{drivertest.EncodedMessage(t, testURN, q, map[string]int{"i": 1})}); err != nil {
		t.Fatal(err)
	}
	qurl, err := api.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		t.Fatal(err)
	}
	viaProxy := awssqs.New(awssqs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(hangFirstProxy(t)),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
	})
	r := NewReceiver(viaProxy, aws.ToString(qurl.QueueUrl), WithWaitTime(time.Second))
	r.cfg.pollSlack = 300 * time.Millisecond
	defer r.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	ds, err := r.Receive(ctx, 1)
	if ctx.Err() != nil {
		t.Fatalf("Receive still waiting on the hung poll after %v", time.Since(start).Round(time.Millisecond))
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("Receive on a hung connection = %d deliveries, %v; want an error saying the poll got no answer", len(ds), err)
	}
	for len(ds) == 0 && ctx.Err() == nil {
		if ds, err = r.Receive(ctx, 1); err != nil {
			t.Fatalf("Receive after the hung poll: %v", err)
		}
	}
	if len(ds) != 1 {
		t.Fatalf("got %d deliveries after the hung poll, want the message", len(ds))
	}
	if err := r.Ack(context.Background(), ds[0]); err != nil {
		t.Fatal(err)
	}
}
