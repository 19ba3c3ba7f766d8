package queue

import (
	"time"

	"github.com/babelqueue/transports/core"
)

// Outcome is how a handled message was settled.
type Outcome string

// Handler outcomes.
const (
	OutcomeAcked        Outcome = "acked"
	OutcomeRetried      Outcome = "retried"
	OutcomeDeadLettered Outcome = "dead_lettered"
	OutcomeDropped      Outcome = "dropped"
	OutcomeReleased     Outcome = "released"
	OutcomeSkipped      Outcome = "skipped"
)

// Metrics receives the runtime's counters and latencies. An OpenTelemetry or
// Prometheus adapter implements it; core imports neither. Methods are called
// concurrently and must not block. Embed NopMetrics to implement a subset.
type Metrics interface {
	// Published counts messages a Publisher sent (not retry or DLQ copies).
	Published(queue, urn string, n int)
	// Handled records a handler run and its latency.
	Handled(queue, urn string, outcome Outcome, latency time.Duration)
	// Retried counts retries; attempts is the new attempts value.
	Retried(queue, urn string, attempts int)
	// DeadLettered counts messages sent to a dead-letter destination.
	DeadLettered(queue, urn string, reason core.Reason)
	// SettleFailed counts failed acknowledgements, releases and the failed
	// publishes of retry and dead-letter copies; op names which.
	SettleFailed(queue, op string)
}

// NopMetrics discards everything.
type NopMetrics struct{}

// Published implements Metrics.
func (NopMetrics) Published(string, string, int) {}

// Handled implements Metrics.
func (NopMetrics) Handled(string, string, Outcome, time.Duration) {}

// Retried implements Metrics.
func (NopMetrics) Retried(string, string, int) {}

// DeadLettered implements Metrics.
func (NopMetrics) DeadLettered(string, string, core.Reason) {}

// SettleFailed implements Metrics.
func (NopMetrics) SettleFailed(string, string) {}
