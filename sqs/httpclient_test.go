package sqs

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// closesEarly is a request body as the SDK builds it: an io.WriterTo whose
// WriteTo, once the body is closed, returns io.EOF.
type closesEarly struct {
	r      *bytes.Reader
	closed bool
}

func (b *closesEarly) Read(p []byte) (int, error) {
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closesEarly) WriteTo(w io.Writer) (int64, error) {
	if b.closed {
		return 0, io.EOF
	}
	return b.r.WriteTo(w)
}

func (b *closesEarly) Close() error { b.closed = true; return nil }

// TestSafeRequestBodies: the option wraps whatever client the SDK resolved
// (once, however often it is given), and the body it sends has no WriteTo,
// so a body closed under net/http's copy reads as ended instead of failing
// the copy: io.Copy of the SDK's closed body fails, of the wrapped one not.
func TestSafeRequestBodies(t *testing.T) {
	var seen io.ReadCloser
	next := doFunc(func(r *http.Request) (*http.Response, error) {
		seen = r.Body
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	o := awssqs.Options{HTTPClient: next}
	SafeRequestBodies(&o)
	SafeRequestBodies(&o)
	outer, ok := o.HTTPClient.(safeBodies)
	if !ok {
		t.Fatalf("HTTPClient is %T, want the option's wrapper", o.HTTPClient)
	}
	if _, twice := outer.next.(safeBodies); twice {
		t.Error("the option given twice wraps the client twice")
	}
	body := &closesEarly{r: bytes.NewReader([]byte(`{"QueueUrl":"q"}`))}
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", body)
	if _, err := o.HTTPClient.Do(req); err != nil {
		t.Fatal(err)
	}
	if _, isWriterTo := seen.(io.WriterTo); isWriterTo {
		t.Fatalf("the body sent is %T, still an io.WriterTo", seen)
	}
	body.Close()
	if _, err := io.Copy(io.Discard, body); err == nil {
		t.Fatal("io.Copy of the SDK's closed body did not fail: the race the option guards against is gone")
	}
	if n, err := io.Copy(io.Discard, seen); n != 0 || err != nil {
		t.Errorf("io.Copy of the closed wrapped body = %d, %v; want 0, nil", n, err)
	}
	var empty awssqs.Options
	SafeRequestBodies(&empty)
	if _, ok := empty.HTTPClient.(safeBodies); !ok {
		t.Errorf("with no client resolved yet, HTTPClient is %T", empty.HTTPClient)
	}
}

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// TestSafeRequestBodiesUnderLoad sends 300 rounds of a three-request batch
// publish and the receives that take it back through a client with the
// option and no SDK retries, a new client each round as a test suite
// builds them: no request fails. (On the machine it was written on, 1 of 8
// runs without the option saw a ReceiveMessage fail with "use of closed
// network connection", and 0 of 10 with it.)
func TestSafeRequestBodiesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	base := client(t)
	q := newQueue(t, false)
	u, err := base.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 400)
	for round := range 300 {
		api := awssqs.New(awssqs.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(endpoint), RetryMaxAttempts: 1,
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		}, SafeRequestBodies)
		var entries []types.SendMessageBatchRequestEntry
		for i := range 10 {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body)})
		}
		for range 3 {
			if _, err := api.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: u.QueueUrl, Entries: entries}); err != nil {
				t.Fatalf("round %d: SendMessageBatch: %v", round, err)
			}
		}
		for got := 0; got < 30; {
			out, err := api.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				t.Fatalf("round %d: ReceiveMessage: %v", round, err)
			}
			if len(out.Messages) == 0 {
				t.Fatalf("round %d: %d of 30 received, then none", round, got)
			}
			got += len(out.Messages)
			var del []types.DeleteMessageBatchRequestEntry
			for i, m := range out.Messages {
				del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
			if _, err := api.DeleteMessageBatch(context.Background(), &awssqs.DeleteMessageBatchInput{QueueUrl: u.QueueUrl, Entries: del}); err != nil {
				t.Fatalf("round %d: DeleteMessageBatch: %v", round, err)
			}
		}
	}
}
