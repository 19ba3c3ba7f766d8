package sqs

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
)

// Message attribute names of the SQS binding.
const (
	AttrJob           = "bq-job"
	AttrTraceID       = "bq-trace-id"
	AttrMessageID     = "bq-message-id"
	AttrSchemaVersion = "bq-schema-version"
	AttrSourceLang    = "bq-source-lang"
	AttrCreatedAt     = "bq-created-at"
	// AttrDeadLetterReason carries dead_letter.reason natively on dead-letter
	// copies, the only record of it on a poison copy.
	AttrDeadLetterReason = "bq-dead-letter-reason"
)

// SQS limits.
const (
	MaxAttributes  = 10
	MaxMessageSize = 256 << 10 // body + attributes
	MaxBatch       = 10
)

// entryIDs are the ids of a batch request's entries, their index: the
// entries point into it rather than at a fresh string each. Read only.
var entryIDs = [MaxBatch]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// ErrTooLarge reports a message whose body and attributes exceed 256 KiB.
// It wraps driver.ErrTooLarge, so the runtime falls back to a smaller
// dead-letter copy.
var ErrTooLarge = fmt.Errorf("babelqueue/sqs: message exceeds the 256 KiB SQS limit: %w", driver.ErrTooLarge)

// MaxDelay is the longest delay SQS keeps for a message it is sent
// (DelaySeconds, 15 minutes).
const MaxDelay = 15 * time.Minute

// ErrDelayUnsupported reports a delayed message SQS cannot keep the delay
// of: more than MaxDelay, or a delay asked for at publish on a FIFO queue,
// which takes no per-message delay (SQS's own API refuses both). A retry
// copy (queue.RetryRepublish) delayed past MaxDelay is refused too: the
// runtime then retries natively, releasing the message it could not copy,
// and SQS keeps the delay as its visibility timeout (up to 12 hours). It
// matches driver.ErrRejected.
var ErrDelayUnsupported = driver.Rejection("babelqueue/sqs: SQS cannot keep the delay asked for", nil)

// seconds rounds a delay up to whole seconds, the unit of SQS visibility
// timeouts and delays: a 500ms backoff becomes 1s, never 0 (which would
// redeliver at once). A delay past what an int32 holds saturates.
func seconds(d time.Duration) int32 {
	switch {
	case d <= 0:
		return 0
	case d > math.MaxInt32*time.Second:
		return math.MaxInt32
	}
	return int32((d + time.Second - 1) / time.Second)
}

// ErrTooManyAttributes reports more than 10 message attributes. It matches
// driver.ErrRejected.
var ErrTooManyAttributes = driver.Rejection("babelqueue/sqs: more than 10 message attributes", nil)

func str(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func num(v int64) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(v, 10))}
}

func isContract(name string) bool {
	switch name {
	case AttrJob, AttrTraceID, AttrMessageID, AttrSchemaVersion, AttrSourceLang, AttrCreatedAt, AttrDeadLetterReason:
		return true
	}
	return false
}

// Attributes projects m onto SQS message attributes: the six contract
// attributes, the dead-letter reason on dead-letter copies, then the extra
// headers as String attributes in name order (a contract attribute always
// wins a name clash; empty values are skipped, SQS rejects them). With more
// than 10 attributes it returns ErrTooManyAttributes, unless drop is set, in
// which case the extra headers past the limit are left out.
func Attributes(m *driver.Message, drop bool) (map[string]types.MessageAttributeValue, error) {
	attrs := make(map[string]types.MessageAttributeValue, 8)
	if e := m.Envelope; e != nil {
		attrs[AttrJob] = str(e.URN)
		attrs[AttrTraceID] = str(e.TraceID)
		attrs[AttrMessageID] = str(e.Meta.ID)
		attrs[AttrSchemaVersion] = num(int64(e.Meta.SchemaVersion))
		attrs[AttrSourceLang] = str(e.Meta.Lang)
		attrs[AttrCreatedAt] = num(e.Meta.CreatedAt)
		for k, v := range attrs {
			if aws.ToString(v.StringValue) == "" { // SQS rejects empty values
				delete(attrs, k)
			}
		}
	}
	if dl := m.DeadLetter; dl != nil {
		attrs[AttrDeadLetterReason] = str(string(dl.Reason))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		v := m.Headers[k]
		if isContract(k) || v == "" {
			continue
		}
		if len(attrs) == MaxAttributes {
			if drop {
				break
			}
			return nil, fmt.Errorf("%w: %d extra headers do not fit beside the contract attributes", ErrTooManyAttributes, len(m.Headers))
		}
		attrs[k] = str(v)
	}
	return attrs, nil
}

// size is the SQS size of a message: body plus attribute names, types and values.
func size(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// NativeAttempts maps ApproximateReceiveCount to the 0-based attempts scale
// (count − 1); an absent or unparseable count is unknown.
func NativeAttempts(count string, present bool) core.NativeAttempts {
	if !present {
		return core.NativeAttempts{}
	}
	n, err := strconv.Atoi(count)
	if err != nil {
		return core.NativeAttempts{}
	}
	return core.NativeAttempts{Count: n - 1, Known: true}
}

// Attempts is the consume-side reconciliation:
// max(bodyAttempts, ApproximateReceiveCount − 1), ignoring an absent or
// garbage count.
func Attempts(bodyAttempts int, count string, present bool) int {
	return NativeAttempts(count, present).Reconcile(bodyAttempts)
}

// Gate applies the schema-version gate to the bq-schema-version attribute.
func Gate(value string, present bool) error { return core.CheckSchemaVersion(value, present) }

// IsFIFO reports whether a queue name or URL is a FIFO queue.
func IsFIFO(queue string) bool { return strings.HasSuffix(queue, ".fifo") }

// DeadLetterQueue is the default dead-letter queue of queue: "<queue>.dlq",
// or "<name>.dlq.fifo" for a FIFO queue (whose dead-letter queue must be
// FIFO too).
func DeadLetterQueue(queue string) string {
	if base, ok := strings.CutSuffix(queue, ".fifo"); ok {
		return base + ".dlq.fifo"
	}
	return queue + ".dlq"
}
