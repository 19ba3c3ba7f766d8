package kafka

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/drivertest"
)

// EnvServerScript names the scripts/kafka-server.sh that started the broker
// named by BQ_KAFKA_BROKERS; with it the fault suite also kills the broker
// (kill -9) mid-consume and starts it again on its data.
const EnvServerScript = "BQ_KAFKA_SERVER_SCRIPT"

// TestFaults runs the shared fault suite (make faults prints its table).
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite is long")
	}
	snd := newTestSender(t)
	h := drivertest.FaultHarness{
		Harness: drivertest.Harness{
			NewQueue: func(t *testing.T) string { return newTopics(t, 1) },
			Sender:   func(*testing.T) driver.Sender { return snd },
			Receiver: func(t *testing.T, q string) (driver.Receiver, func()) {
				r := newTestReceiver(t, "g-"+q, []string{q})
				return r, r.kill
			},
			Timeout: 90 * time.Second,
		},
		Module:    "kafka",
		Server:    strings.Fields(server)[0],
		CommitLag: 40,
		MissingDeadLetterQueue: func(t *testing.T) string {
			name := topicName(t)
			createTopics(t, 1, name)
			return name
		},
	}
	if script := os.Getenv(EnvServerScript); script != "" && os.Getenv(EnvBrokers) != "" {
		h.Server = "kafka-4.4.0"
		run := func(t *testing.T, verb string) {
			out, err := exec.Command(script, verb).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", script, verb, err, out)
			}
		}
		h.KillBroker = func(t *testing.T) { run(t, "kill") }
		h.StartBroker = func(t *testing.T) { run(t, "resume") }
	}
	drivertest.RunFaults(t, h)
}
