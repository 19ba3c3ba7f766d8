package queue

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue/transports/core/driver"
)

// Health is a Consumer's state for readiness and liveness probes.
type Health struct {
	// Running: Run has started and not returned.
	Running bool `json:"running"`
	// Ready: running, past the startup check, and the last Receive
	// succeeded: the consumer is connected and taking messages.
	Ready bool `json:"ready"`
	// Live: not wedged. The receive loop made progress within the
	// liveness window, or every handler that holds it up has run for less
	// than the stuck threshold.
	Live bool `json:"live"`
	// Started is when Run started (zero when it has not).
	Started time.Time `json:"started,omitzero"`
	// LastReceive is when a Receive last succeeded (with or without
	// messages).
	LastReceive time.Time `json:"last_receive,omitzero"`
	// ReceiveError is the last Receive error since the last success.
	ReceiveError string `json:"receive_error,omitempty"`
	// ReceiveErrors counts the Receive errors since the last success.
	ReceiveErrors int `json:"receive_errors"`
	// InFlight is how many handlers are running.
	InFlight int `json:"in_flight"`
	// Stuck is how many of them have run longer than the stuck threshold.
	Stuck int `json:"stuck"`
	// SettleErrors counts failed settlements (acks, releases, copies) so
	// far; SettleErrorsPerMinute those of the last minute.
	SettleErrors          int64 `json:"settle_errors"`
	SettleErrorsPerMinute int   `json:"settle_errors_per_minute"`
}

// health is the consumer's bookkeeping behind Health.
type health struct {
	mu          sync.Mutex
	running     bool
	ready       bool
	started     time.Time
	lastReceive time.Time
	lastLoop    time.Time
	recvErr     error
	recvErrs    int
	workers     []workerSlot // one per handler the pool may run
	settleErrs  int64
	recent      []time.Time // settle errors of the last minute
}

// WithStuckThreshold sets how long a handler may run before Health counts
// it stuck and the consumer stops being live (default 5m).
func WithStuckThreshold(d time.Duration) ConsumerOption {
	return func(c *Consumer) {
		if d > 0 {
			c.stuckAfter = d
		}
	}
}

// workerSlot is when the worker that owns it started the handler it runs,
// in Unix nanoseconds (0: idle). Each worker writes only its own slot, with
// no lock, and Health reads them all; a slot fills its cache line so that
// workers on different cores do not contend for one.
type workerSlot struct {
	since atomic.Int64
	_     [56]byte
}

func (w *workerSlot) begin(now time.Time) { w.since.Store(now.UnixNano()) }
func (w *workerSlot) end()                { w.since.Store(0) }

func (h *health) start(now time.Time, workers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.ready, h.started, h.lastLoop = true, false, now, now
	h.recvErr, h.recvErrs = nil, 0
	h.workers = make([]workerSlot, workers)
}

func (h *health) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.ready = false, false
}

func (h *health) received(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastLoop = now
	if err != nil {
		h.recvErr = err
		h.recvErrs++
		h.ready = false
		return
	}
	h.lastReceive, h.recvErr, h.recvErrs, h.ready = now, nil, 0, true
}

func (h *health) settleFailed(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settleErrs++
	h.recent = append(h.recent, now)
}

// Lag reports, per consumed queue, how many messages the consumer is
// behind, where the driver knows it (driver.Lagger: Kafka); nil otherwise.
func (c *Consumer) Lag() map[string]int64 {
	if l, ok := c.rcv.(driver.Lagger); ok {
		return l.Lag()
	}
	return nil
}

// Health returns the consumer's state for probes.
func (c *Consumer) Health() Health {
	h := &c.health
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{
		Running: h.running, Ready: h.running && h.ready, Started: h.started, LastReceive: h.lastReceive,
		ReceiveErrors: h.recvErrs, SettleErrors: h.settleErrs,
	}
	if h.recvErr != nil {
		out.ReceiveError = h.recvErr.Error()
	}
	for i := range h.workers {
		since := h.workers[i].since.Load()
		if since == 0 {
			continue
		}
		out.InFlight++
		if now.Sub(time.Unix(0, since)) > c.stuckAfter {
			out.Stuck++
		}
	}
	cut := 0
	for cut < len(h.recent) && now.Sub(h.recent[cut]) > time.Minute {
		cut++
	}
	h.recent = h.recent[cut:]
	out.SettleErrorsPerMinute = len(h.recent)
	// The loop is blocked when every slot is taken; that is only a
	// problem when the handlers holding them are stuck.
	progressing := now.Sub(h.lastLoop) < c.stuckAfter
	out.Live = h.running && (progressing || out.Stuck == 0)
	return out
}

// HealthHandler serves the health of consumers as JSON for Kubernetes
// probes: /livez and /readyz answer 200 when every consumer is live
// (ready), 503 otherwise; any other path answers the full state of each
// consumer with the status of readiness.
func HealthHandler(consumers ...*Consumer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		states := make([]Health, len(consumers))
		live, ready := true, true
		for i, c := range consumers {
			states[i] = c.Health()
			live = live && states[i].Live
			ready = ready && states[i].Ready
		}
		ok := ready
		if r.URL.Path == "/livez" || len(r.URL.Path) > 6 && r.URL.Path[len(r.URL.Path)-6:] == "/livez" {
			ok = live
		}
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"live": live, "ready": ready, "consumers": states})
	})
}
