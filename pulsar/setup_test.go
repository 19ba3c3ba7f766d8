package pulsar

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/babelqueue/transports/core/drivertest"
)

// EnvURL names the environment variable with the service URL of the Pulsar
// broker the integration tests run against (scripts/pulsar-server.sh env).
const EnvURL = "BQ_PULSAR_URL"

var (
	serviceURL = os.Getenv(EnvURL)
	topicNo    atomic.Int64
)

// needBroker skips without BQ_PULSAR_URL, saying how to start a broker;
// under CI it fails instead.
func needBroker(t testing.TB) {
	t.Helper()
	if serviceURL == "" {
		drivertest.NoServer(t, "no Pulsar broker: run scripts/pulsar-server.sh start and set "+EnvURL+"=pulsar://127.0.0.1:16650")
	}
}

func newClient(t testing.TB) pulsar.Client {
	t.Helper()
	needBroker(t)
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               serviceURL,
		OperationTimeout:  30 * time.Second,
		ConnectionTimeout: 10 * time.Second,
		Logger:            plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

var unsafeTopic = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

func newTopic(t testing.TB) string {
	return fmt.Sprintf("bq-%s-%d-%d", unsafeTopic.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e6, topicNo.Add(1))
}
