package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/babelqueue/transports/core/queue"
)

// item is one message of the dead-letter queue, inspected.
type item struct {
	d        *driver.Delivery
	env      *core.Envelope // nil when the body is not an envelope
	bad      error          // why the body is not an envelope
	poison   bool           // a poison copy: the original bytes of a message that could not be decoded
	urn, id  string
	reason   string
	errText  string
	original string
	attempts int
	failedAt time.Time
}

func inspect(d *driver.Delivery) *item {
	it := &item{d: d, reason: d.Headers[driver.HeaderDeadLetterReason]}
	env, err := core.Decode(d.Body)
	if err != nil {
		it.bad = err
		it.poison = it.reason == string(core.ReasonPoison)
		return it
	}
	it.env, it.urn, it.id, it.attempts = env, env.URN, env.Meta.ID, env.Attempts
	if dl := env.DeadLetter; dl != nil {
		it.reason, it.errText, it.original = string(dl.Reason), dl.Error, dl.OriginalQueue
		if dl.FailedAt > 0 {
			it.failedAt = time.UnixMilli(dl.FailedAt).UTC()
		}
	}
	return it
}

// done names what a settling command did to a message.
func done(command string) string {
	switch command {
	case "redrive":
		return "redriven"
	case "replay":
		return "replayed"
	}
	return "deleted"
}

// summary is what a command did.
type summary struct {
	command     string
	seen        int // messages received
	matched     int // of which matched the filters
	done        int // redriven, replayed or purged
	failed      int
	behind      int // matched, left behind an unsettled record of its Kafka partition
	interrupted bool
	elapsed     time.Duration
}

// execute opens the queue, walks it and settles what the command asks.
func execute(ctx context.Context, c cli, cmd command, stdout, stderr io.Writer) (summary, error) {
	sum := summary{command: cmd.name}
	t, err := parseTarget(cmd.filters.URL)
	if err != nil {
		return sum, err
	}
	ep, err := open(ctx, t, c.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			sum.interrupted = true
			return sum, nil
		}
		return sum, err
	}
	w := &writer{json: c.JSON, out: stdout, cmd: cmd}
	start := time.Now()
	bar := newBar(cmd, stderr, c.JSON)
	var held []*driver.Delivery
	if ep.browse != nil && (cmd.name == "peek" || cmd.name == "count") {
		if err := browse(ctx, ep, cmd, w, bar, &sum); err != nil {
			w.fail(&sum, "", err)
		}
	} else {
		held = walk(ctx, ep, t, cmd, w, bar, &sum)
	}
	_ = bar.Finish()
	// Hand back what was looked at and not settled, then close (Kafka
	// commits what was settled).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	var unreturned int
	var lastErr error
	for _, d := range held {
		var err error
		if r, ok := ep.rcv.(driver.Returner); ok {
			err = r.Return(sctx, d)
		} else {
			err = ep.rcv.Release(sctx, d, 0)
		}
		if err != nil {
			unreturned, lastErr = unreturned+1, err
		}
	}
	if unreturned > 0 {
		fmt.Fprintf(stderr, "bq: warning: %d messages could not be handed back at once (they come back when their lock or visibility timeout expires): %v\n", unreturned, lastErr)
	}
	ep.close(sctx)
	cancel()
	sum.elapsed = time.Since(start)
	w.summary(sum, stderr)
	return sum, nil
}

// walk receives until the queue is drained (nothing for --wait), the limit
// is reached or ctx is done, and returns the deliveries it holds unsettled.
func walk(ctx context.Context, ep *endpoint, t target, cmd command, w *writer, bar *progressbar.ProgressBar, sum *summary) []*driver.Delivery {
	var held []*driver.Delivery
	seen := map[string]bool{}
	// A Kafka topic is a log: its group offset passes a record only once
	// every record before it is settled. A settling command that leaves a
	// record (filtered out, or failed) leaves every later record of that
	// partition too, so that no settled record stays behind the offset to
	// be sent again by the next run.
	inOrder := t.scheme == "kafka" && cmd.name != "peek" && cmd.name != "count"
	blocked := map[string]bool{}
	limit := cmd.filters.Limit
	last := time.Now()
	for limit == 0 || sum.matched < limit {
		if ctx.Err() != nil {
			sum.interrupted = true
			break
		}
		if time.Since(last) > cmd.filters.Wait {
			break
		}
		// No more than the limit still wants: a receive takes what it
		// gets out of sight (SQS runs a long poll per 10 asked for).
		want := 64
		if limit > 0 {
			want = min(want, max(limit-sum.matched, 1))
		}
		ds, err := ep.rcv.Receive(ctx, want)
		if err != nil {
			if ctx.Err() != nil {
				sum.interrupted = true
				break
			}
			w.fail(sum, "", fmt.Errorf("receiving from %s: %w", t.raw, err))
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if len(ds) > 0 {
			last = time.Now()
		}
		for _, d := range ds {
			if d.Position != "" && seen[d.Position] {
				held = append(held, d) // seen again: the queue came round
				continue
			}
			seen[d.Position] = true
			sum.seen++
			it := inspect(d)
			if !cmd.filter.match(it) || (limit > 0 && sum.matched >= limit) || ctx.Err() != nil {
				held = append(held, d)
				blocked[d.OrderingKey] = true
				continue
			}
			sum.matched++
			if inOrder && blocked[d.OrderingKey] {
				sum.behind++
				held = append(held, d)
				continue
			}
			if !act(ctx, ep, t, cmd, w, it, sum) {
				held = append(held, d)
				if !cmd.dryRun {
					blocked[d.OrderingKey] = true
				}
			}
			_ = bar.Add(1)
		}
	}
	return held
}

// browse reads the queue without settling or locking anything.
func browse(ctx context.Context, ep *endpoint, cmd command, w *writer, bar *progressbar.ProgressBar, sum *summary) error {
	limit := cmd.filters.Limit
	err := ep.browse(ctx, func(d *driver.Delivery) bool {
		if ctx.Err() != nil {
			sum.interrupted = true
			return false
		}
		sum.seen++
		it := inspect(d)
		if !cmd.filter.match(it) {
			return true
		}
		sum.matched++
		if cmd.name == "peek" {
			w.show(it)
		}
		_ = bar.Add(1)
		return limit == 0 || sum.matched < limit
	})
	if err != nil && ctx.Err() != nil {
		sum.interrupted = true
		return nil
	}
	return err
}

// act applies the command to one matching message and reports whether it
// settled it.
func act(ctx context.Context, ep *endpoint, t target, cmd command, w *writer, it *item, sum *summary) bool {
	switch cmd.name {
	case "peek":
		w.show(it)
		return false
	case "count":
		return false
	case "purge":
		if cmd.dryRun {
			w.action(it, "would delete", "")
			return false
		}
		// Not cut short by Ctrl-C: a message is either left or deleted.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := ep.rcv.Ack(sctx, it.d); err != nil {
			w.fail(sum, it.d.Position, fmt.Errorf("deleting: %w", err))
			return false
		}
		sum.done++
		w.action(it, "deleted", "")
		return true
	}
	// redrive, replay
	msg, err := copyOf(it, t, cmd)
	if err != nil {
		w.fail(sum, it.d.Position, err)
		return false
	}
	if cmd.dryRun {
		w.action(it, "would send to", msg.Queue)
		return false
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := ep.snd.Send(sctx, []*driver.Message{msg}); err != nil {
		w.fail(sum, it.d.Position, fmt.Errorf("sending to %s: %w; left in the dead-letter queue", msg.Queue, err))
		return false
	}
	// Settled only now that the copy is accepted.
	if err := ep.rcv.Ack(sctx, it.d); err != nil {
		w.fail(sum, it.d.Position, fmt.Errorf("sent to %s, but not removed from the dead-letter queue (it would be sent again): %w", msg.Queue, err))
		return false
	}
	sum.done++
	w.action(it, done(cmd.name)+" to", msg.Queue)
	return true
}

// copyOf builds the message a redrive or replay sends: the envelope with
// dead_letter removed and attempts 0, to dead_letter.original_queue (else
// meta.queue); a poison copy's bytes unchanged.
func copyOf(it *item, t target, cmd command) (*driver.Message, error) {
	headers := queue.ExtraHeaders(it.d.Headers)
	if headers == nil {
		headers = map[string]string{}
	}
	delete(headers, queue.HeaderReplay)
	if cmd.name == "replay" {
		headers[queue.HeaderReplay] = "1"
	}
	if it.env != nil {
		env, dest := it.env.Redrive()
		if cmd.to != "" {
			dest = cmd.to
		}
		if dest == "" {
			return nil, fmt.Errorf("message %s names no original queue (no dead_letter.original_queue, no meta.queue); pass --to", it.id)
		}
		body, err := env.Encode()
		if err != nil {
			return nil, fmt.Errorf("encoding message %s: %w", it.id, err)
		}
		return &driver.Message{Envelope: env, Body: body, Queue: dest, Headers: headers}, nil
	}
	if !it.poison {
		return nil, fmt.Errorf("not a BabelQueue envelope (%v) and not a poison copy; left in place", it.bad)
	}
	dest := cmd.to
	if dest == "" {
		dest = it.d.Headers["bq-original-topic"]
	}
	if dest == "" {
		dest = originalOf(t.queue)
	}
	if dest == "" {
		return nil, fmt.Errorf("poison copy: its original queue is not recorded; pass --to")
	}
	return &driver.Message{Body: it.d.Body, Queue: dest, Headers: headers}, nil
}

// originalOf is the queue a default dead-letter queue name belongs to
// ("orders.dlq" → "orders", SQS FIFO "orders.dlq.fifo" → "orders.fifo").
func originalOf(dlq string) string {
	switch {
	case strings.HasSuffix(dlq, ".dlq.fifo"):
		return strings.TrimSuffix(dlq, ".dlq.fifo") + ".fifo"
	case strings.HasSuffix(dlq, ".dlq"):
		return strings.TrimSuffix(dlq, ".dlq")
	}
	return ""
}

func newBar(cmd command, stderr io.Writer, jsonOut bool) *progressbar.ProgressBar {
	visible := false
	if f, ok := stderr.(*os.File); ok && !jsonOut {
		visible = term.IsTerminal(int(f.Fd()))
	}
	total := int64(-1)
	if cmd.filters.Limit > 0 {
		total = int64(cmd.filters.Limit)
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(visible),
		progressbar.OptionSetDescription(cmd.name),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// writer prints what the command does, as text or JSON lines.
type writer struct {
	json bool
	out  io.Writer
	cmd  command
}

// record is the JSON form of a message.
type record struct {
	Position      string            `json:"position,omitempty"`
	URN           string            `json:"urn,omitempty"`
	ID            string            `json:"id,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	Error         string            `json:"error,omitempty"`
	FailedAt      *time.Time        `json:"failed_at,omitempty"`
	OriginalQueue string            `json:"original_queue,omitempty"`
	Attempts      int               `json:"attempts"`
	Poison        bool              `json:"poison,omitempty"`
	NotEnvelope   string            `json:"not_envelope,omitempty"`
	Envelope      json.RawMessage   `json:"envelope,omitempty"`
	Raw           string            `json:"raw,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Action        string            `json:"action,omitempty"`
	To            string            `json:"to,omitempty"`
}

func (w *writer) record(it *item) record {
	r := record{Position: it.d.Position, URN: it.urn, ID: it.id, Reason: it.reason, Error: it.errText,
		OriginalQueue: it.original, Attempts: it.attempts, Poison: it.poison}
	if !it.failedAt.IsZero() {
		r.FailedAt = &it.failedAt
	}
	if it.env != nil {
		r.Envelope = it.d.Body
	} else {
		r.Raw = rawText(it.d.Body)
		r.NotEnvelope = it.bad.Error()
	}
	if w.cmd.headers {
		r.Headers = it.d.Headers
	}
	return r
}

// rawText is the body as text when it is UTF-8, else hex-escaped.
func rawText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("%q", b)
}

func (w *writer) emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w.out, "%s\n", b)
}

func (w *writer) show(it *item) {
	if w.json {
		w.emit(w.record(it))
		return
	}
	pos := it.d.Position
	if pos == "" {
		pos = "-"
	}
	if it.env == nil {
		kind := "not an envelope"
		if it.poison {
			kind = "POISON copy (the original bytes)"
		}
		fmt.Fprintf(w.out, "%s  %s, %d bytes  reason=%s\n  why: %v\n  raw: %s\n", pos, kind, len(it.d.Body), orDash(it.reason), it.bad, rawText(it.d.Body))
	} else {
		fmt.Fprintf(w.out, "%s  %s  id=%s  reason=%s  attempts=%d", pos, it.urn, it.id, orDash(it.reason), it.attempts)
		if !it.failedAt.IsZero() {
			fmt.Fprintf(w.out, "  failed_at=%s", it.failedAt.Format(time.RFC3339))
		}
		if it.original != "" {
			fmt.Fprintf(w.out, "  from=%s", it.original)
		}
		fmt.Fprintln(w.out)
		if it.errText != "" {
			fmt.Fprintf(w.out, "  error: %s\n", firstLine(it.errText))
		}
		fmt.Fprintf(w.out, "  data: %s\n", it.env.Data())
	}
	if w.cmd.headers {
		for k, v := range it.d.Headers {
			fmt.Fprintf(w.out, "  header %s: %s\n", k, v)
		}
	}
}

func (w *writer) action(it *item, verb, to string) {
	if w.json {
		r := w.record(it)
		r.Envelope, r.Raw = nil, ""
		r.Action, r.To = verb, to
		w.emit(r)
		return
	}
	what := it.urn + " " + it.id
	if it.env == nil {
		what = fmt.Sprintf("poison copy (%d bytes)", len(it.d.Body))
	}
	fmt.Fprintf(w.out, "%s  %s  %s %s\n", orDash(it.d.Position), what, verb, to)
}

func (w *writer) fail(sum *summary, pos string, err error) {
	sum.failed++
	if w.json {
		w.emit(map[string]string{"position": pos, "error": err.Error()})
		return
	}
	if pos != "" {
		fmt.Fprintf(w.out, "%s  error: %v\n", pos, err)
	} else {
		fmt.Fprintf(w.out, "error: %v\n", err)
	}
}

func (w *writer) summary(s summary, stderr io.Writer) {
	rate := 0.0
	if s.elapsed > 0 {
		rate = float64(s.matched) / s.elapsed.Seconds()
	}
	if w.json {
		w.emit(map[string]any{"summary": map[string]any{
			"command": s.command, "received": s.seen, "matched": s.matched, "done": s.done,
			"failed": s.failed, "left_in_order": s.behind, "dry_run": w.cmd.dryRun, "interrupted": s.interrupted,
			"seconds": s.elapsed.Seconds(),
		}})
		return
	}
	if s.command == "count" {
		fmt.Fprintln(w.out, s.matched)
	}
	msg := fmt.Sprintf("bq %s: %d received, %d matched", s.command, s.seen, s.matched)
	switch s.command {
	case "redrive", "replay", "purge":
		if w.cmd.dryRun {
			msg += fmt.Sprintf(", dry run: nothing %s", done(s.command))
		} else {
			msg += fmt.Sprintf(", %d %s", s.done, done(s.command))
		}
	}
	msg += fmt.Sprintf(", %d failed, in %s (%.0f msg/s)", s.failed, s.elapsed.Round(time.Millisecond), rate)
	if s.behind > 0 {
		msg += fmt.Sprintf("; %d matching left behind records the run did not settle (a Kafka partition settles in order: run again, or widen the filter)", s.behind)
	}
	if s.interrupted {
		msg += "; interrupted: the rest is untouched"
	}
	fmt.Fprintln(stderr, msg)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
