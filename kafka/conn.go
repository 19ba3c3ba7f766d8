package kafka

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// connWatch is a franz-go hook that remembers the last failed dial to a
// broker and warns about failed dials at most every warnEvery, so that a
// wrong or unreachable broker address names itself (in Publish errors, the
// startup check and the log) instead of surfacing as a bare context
// deadline.
type connWatch struct {
	logger    *slog.Logger
	role      string // "producer" or "consumer"
	warnEvery time.Duration

	mu     sync.Mutex
	last   error
	warned time.Time
}

func newConnWatch(logger *slog.Logger, role string) *connWatch {
	return &connWatch{logger: logger, role: role, warnEvery: 10 * time.Second}
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (w *connWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.last = nil
		return
	}
	w.last = fmt.Errorf("connecting to %s: %w", net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), err)
	if time.Since(w.warned) >= w.warnEvery {
		w.warned = time.Now()
		w.logger.Warn("babelqueue/kafka: cannot reach a broker", slog.String("client", w.role), slog.Any("error", w.last))
	}
}

// lastErr returns the last failed dial, or nil when the last dial worked.
func (w *connWatch) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

var _ kgo.HookBrokerConnect = (*connWatch)(nil)
