package azureservicebus

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/babelqueue/transports/core/drivertest"
)

// EnvConnectionString names the environment variable with the connection
// string of a real namespace or of the official emulator. Without it the
// tests run against testserver/sbserver.py, an AMQP 1.0 server on Debian's
// python3-qpid-proton, started here on a free 127.0.0.1 port.
const EnvConnectionString = "BQ_ASB_CONNECTION_STRING"

// lockDuration is the peek-lock duration of the test queues: 2s on the
// test server, 5s (the minimum) on a real namespace.
var lockDuration = 2 * time.Second

var (
	connString string
	server     string
	skipWhy    string
	queueNo    atomic.Int64
)

func TestMain(m *testing.M) {
	if cs := os.Getenv(EnvConnectionString); cs != "" {
		connString, server = cs, "the namespace of "+EnvConnectionString
		lockDuration = 5 * time.Second
		os.Exit(m.Run())
	}
	stop, err := startTestServer()
	if err != nil {
		skipWhy = err.Error() + "; run apt-get install python3-qpid-proton (the tests then start the AMQP test server themselves), or set " + EnvConnectionString + " to a namespace's connection string"
		os.Exit(m.Run())
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startTestServer() (func(), error) {
	port, err := drivertest.FreePort()
	if err != nil {
		return nil, err
	}
	cmd, cs, err := launchTestServer(port, "")
	if err != nil {
		return nil, err
	}
	connString = cs
	server = fmt.Sprintf("testserver/sbserver.py on 127.0.0.1:%d", port)
	return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// launchTestServer starts testserver/sbserver.py on 127.0.0.1:port (with
// dataDir, keeping its queues in SQLite there) and returns its connection
// string once it accepts connections.
func launchTestServer(port int, dataDir string) (*exec.Cmd, string, error) {
	python := "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import proton").CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("no AMQP test server: %s cannot import proton: %s", python, strings.TrimSpace(string(out)))
	}
	args := []string{"testserver/sbserver.py", "--port", fmt.Sprint(port), "--lock-duration", fmt.Sprint(lockDuration.Seconds())}
	if dataDir != "" {
		args = append(args, "--data-dir", dataDir)
	}
	cmd := exec.Command(python, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("the AMQP test server did not start")
	}
	// proton listens a moment after it says ready.
	for range 50 {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, fmt.Sprintf("Endpoint=sb://127.0.0.1:%d;SharedAccessKeyName=test;SharedAccessKey=test;UseDevelopmentEmulator=true", port), nil
}

func needServer(t testing.TB) {
	t.Helper()
	if connString == "" {
		drivertest.NoServer(t, skipWhy)
	}
}

func newClient(t testing.TB) *azservicebus.Client {
	t.Helper()
	needServer(t)
	c, err := azservicebus.NewClientFromConnectionString(connString, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })
	return c
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// sessionSuffix ends the names of session-enabled test queues (the test
// server's --session-suffix default).
const sessionSuffix = "-sessions"

// newQueue names a fresh queue. The test server creates queues on first
// use; on a real namespace the queue and its .dlq are created through the
// administration client (and deleted after the test).
func newQueue(t testing.TB) string { return makeQueue(t, false) }

// newSessionQueue names a fresh session-enabled queue (its .dlq is not).
func newSessionQueue(t testing.TB) string { return makeQueue(t, true) }

// entityName names a fresh entity after the test.
func entityName(t testing.TB) string {
	name := fmt.Sprintf("bq-%s-%d", unsafeName.ReplaceAllString(t.Name(), "_"), queueNo.Add(1))
	if len(name) > 90 {
		name = name[len(name)-90:]
	}
	return name
}

func makeQueue(t testing.TB, sessions bool) string {
	name := entityName(t)
	if sessions {
		name += sessionSuffix
	}
	if os.Getenv(EnvConnectionString) != "" {
		adm, err := admin.NewClientFromConnectionString(connString, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{name, name + ".dlq"} {
			if _, err := adm.CreateQueue(context.Background(), q, &admin.CreateQueueOptions{
				Properties: &admin.QueueProperties{LockDuration: ptr("PT5S"), RequiresSession: ptr(sessions && q == name)},
			}); err != nil {
				t.Fatalf("create queue %s: %v", q, err)
			}
			t.Cleanup(func() { _, _ = adm.DeleteQueue(context.Background(), q, nil) })
		}
	}
	return name
}

func newTestReceiver(t testing.TB, client *azservicebus.Client, q string, opts ...ReceiverOption) *Receiver {
	t.Helper()
	r, err := NewReceiver(client, q, append([]ReceiverOption{WithLockRenewal(500 * time.Millisecond), WithPollWait(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newTopic names a fresh topic with the given subscriptions, those named
// with sessionSuffix session-enabled. The test server makes a subscription
// known when a link attaches to it, so receive from each before publishing.
func newTopic(t testing.TB, subs ...string) string {
	name := entityName(t) + "-topic"
	if os.Getenv(EnvConnectionString) != "" {
		adm, err := admin.NewClientFromConnectionString(connString, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := adm.CreateTopic(context.Background(), name, nil); err != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
		t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), name, nil) })
		for _, sub := range subs {
			if _, err := adm.CreateSubscription(context.Background(), name, sub, &admin.CreateSubscriptionOptions{
				Properties: &admin.SubscriptionProperties{LockDuration: ptr("PT5S"), RequiresSession: ptr(strings.HasSuffix(sub, sessionSuffix))},
			}); err != nil {
				t.Fatalf("create subscription %s/%s: %v", name, sub, err)
			}
		}
	}
	return name
}

func newTestSessionReceiver(t testing.TB, client *azservicebus.Client, q string, opts ...ReceiverOption) *SessionReceiver {
	t.Helper()
	r, err := NewSessionReceiver(client, q, append([]ReceiverOption{
		WithLockRenewal(500 * time.Millisecond), WithPollWait(500 * time.Millisecond), WithSessionIdleTimeout(500 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
