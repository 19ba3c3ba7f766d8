package sqs

import (
	"io"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SafeRequestBodies is an option for the SQS client the Sender and Receiver
// are given (awssqs.NewFromConfig(cfg, sqs.SafeRequestBodies)) that keeps a
// race between the SDK and net/http from failing requests the server has
// answered.
//
// The SDK closes a request's body as soon as the response arrives, and its
// closed body's WriteTo returns io.EOF, which io.Copy passes on as an
// error. When net/http is still copying the body at that moment (a fast
// server on a loaded machine), it takes that error for a failed write and
// closes the connection under the response: the call fails with "use of
// closed network connection" and the SDK retries it. For a ReceiveMessage
// the messages the first attempt took are then invisible, handed to no
// one, until their visibility timeout runs out (on a local SQS server
// about one ReceiveMessage in a thousand, under load). The option hides
// WriteTo, so a body closed early reads as ended.
func SafeRequestBodies(o *awssqs.Options) {
	c := o.HTTPClient
	if c == nil {
		c = awshttp.NewBuildableClient()
	}
	if _, done := c.(safeBodies); !done {
		o.HTTPClient = safeBodies{c}
	}
}

// safeBodies is an HTTP client whose requests' bodies have no WriteTo.
type safeBodies struct{ next awssqs.HTTPClient }

func (c safeBodies) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = readCloser{r.Body}
	}
	return c.next.Do(r)
}

// readCloser is an io.ReadCloser and nothing else.
type readCloser struct{ io.ReadCloser }
