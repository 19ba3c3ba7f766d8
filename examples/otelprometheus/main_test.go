package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// One scrape shows every family the issue asks for, with the outcomes.
func TestOnce(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), "127.0.0.1:0", true, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`messaging_client_sent_messages_total{`,
		`babelqueue_outcome="acked"`,
		`babelqueue_outcome="retried"`,
		`babelqueue_outcome="dead_lettered"`,
		`messaging_process_duration_seconds_count{`,
		`babelqueue_retries_total{`,
		`babelqueue_dead_letters_total{`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the scrape has no %s:\n%s", want, out.String())
		}
	}
}
