package sqs

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// TestConformance runs the sqs block of the suite named by
// BQ_CONFORMANCE_DIR, or of the project's embedded suite.
func TestConformance(t *testing.T) {
	s := conformance.FromEnv(t)
	s.RunSQS(t, conformance.SQSBinding{
		Project: func(fixture []byte) (map[string]conformance.SQSAttribute, []byte, error) {
			env, err := core.Decode(fixture)
			if err != nil {
				return nil, nil, err
			}
			body, err := env.Encode()
			if err != nil {
				return nil, nil, err
			}
			in, err := NewSender(nil).Input(&driver.Message{Envelope: env, Body: body, Queue: env.Meta.Queue})
			if err != nil {
				return nil, nil, err
			}
			out := map[string]conformance.SQSAttribute{}
			for k, v := range in.MessageAttributes {
				out[k] = conformance.SQSAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue)}
			}
			return out, []byte(aws.ToString(in.MessageBody)), nil
		},
		Reconcile: func(body int, count *string) int {
			if count == nil {
				return Attempts(body, "", false)
			}
			return Attempts(body, *count, true)
		},
		Gate: func(v string, present bool) bool { return Gate(v, present) == nil },
	})
}
