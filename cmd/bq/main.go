// Command bq looks into and drains BabelQueue dead-letter queues on Kafka,
// SQS, Pulsar and Service Bus.
//
//	bq peek    kafka://127.0.0.1:9092/orders.dlq         show messages, settle nothing
//	bq count   sqs://127.0.0.1:9324/orders.dlq           count them (filters apply)
//	bq redrive pulsar://127.0.0.1:6650/orders.dlq        send each back to its queue, attempts 0
//	bq replay  sb://127.0.0.1:5672/orders.dlq            the same, marked bq-replay-bypass
//	bq purge   kafka://127.0.0.1:9092/orders.dlq --yes   delete them
//
// Every command takes --urn, --reason, --since and --until filters, --limit,
// and --json; redrive, replay and purge take --dry-run. A DLQ message is
// settled only after its copy was accepted by the broker, and Ctrl-C stops
// between messages, so nothing is lost or sent twice. Credentials come from
// the environment as each SDK reads them (AWS_*, PULSAR_AUTH_TOKEN,
// AZURE_SERVICEBUS_CONNECTION_STRING); Kafka and local servers need none.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1 // a message could not be handled, or the broker failed
	exitUsage       = 2 // bad input
	exitInterrupted = 130
)

// run is the command line without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cli, cmd, err := parse(args, stdout)
	if errors.Is(err, errHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "bq:", err)
		return exitUsage
	}
	level := slog.LevelError
	if cli.Verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger) // the broker modules log through the default logger
	sum, err := execute(ctx, cli, cmd, stdout, stderr)
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "bq:", err)
		return exitUsage
	case err != nil:
		fmt.Fprintln(stderr, "bq:", err)
		return exitFailed
	case sum.interrupted:
		return exitInterrupted
	case sum.failed > 0:
		return exitFailed
	}
	return exitOK
}
