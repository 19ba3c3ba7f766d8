package main

import (
	"io"
	"log/slog"

	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// quietPulsarLogger keeps the Pulsar client's own logging out of the
// command's output (-v shows it through slog's default logger).
func quietPulsarLogger() plog.Logger {
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))
}
