package main

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// filterFlags are the flags every command takes.
type filterFlags struct {
	URL    string        `arg:"" name:"url" help:"The dead-letter queue: kafka://host:port[,host:port]/topic[?group=], sqs://host[:port]/queue[?region=], pulsar://host:port/[tenant/ns/]topic[?subscription=], sb://host[:port]/queue[?subscription=]."`
	URN    []string      `help:"Only messages whose URN matches PATTERN (path.Match syntax: urn:babel:orders:*). Repeatable." placeholder:"PATTERN"`
	Reason []string      `help:"Only messages dead-lettered for REASON (failed, poison, unknown_urn, …). Repeatable." placeholder:"REASON"`
	Since  string        `help:"Only messages dead-lettered at or after this time: RFC 3339, or a duration ago (90m)." placeholder:"TIME"`
	Until  string        `help:"Only messages dead-lettered before this time: RFC 3339, or a duration ago." placeholder:"TIME"`
	Limit  int           `help:"Act on at most N matching messages (0: every one)." default:"0" placeholder:"N"`
	Wait   time.Duration `help:"Count the queue drained after this long without a message." default:"2s"`
}

type peekCmd struct {
	filterFlags `embed:""`
	Headers     bool `help:"Show each message's native headers too."`
}

type countCmd struct {
	filterFlags `embed:""`
}

type redriveCmd struct {
	filterFlags `embed:""`
	DryRun      bool   `help:"Show what would be sent where; send and settle nothing."`
	To          string `help:"Send to QUEUE instead of each message's dead_letter.original_queue (or meta.queue). Needed for a poison copy whose origin is not recorded." placeholder:"QUEUE"`
}

type purgeCmd struct {
	filterFlags `embed:""`
	DryRun      bool `help:"Show what would be deleted; delete nothing."`
	Yes         bool `help:"Really delete: purge refuses to run without it (or --dry-run)."`
}

// cli is the command line.
type cli struct {
	JSON    bool          `help:"Write one JSON object per line instead of text (a summary object last)."`
	Verbose bool          `short:"v" help:"Log the broker clients' own messages to stderr."`
	Timeout time.Duration `help:"How long to wait for the broker when connecting." default:"15s"`

	Peek    peekCmd    `cmd:"" help:"Show the messages of a dead-letter queue; settle nothing."`
	Count   countCmd   `cmd:"" help:"Count the messages of a dead-letter queue (filters apply); settle nothing."`
	Redrive redriveCmd `cmd:"" help:"Send each message back to its original queue (dead_letter removed, attempts 0), then remove it from the dead-letter queue."`
	Replay  redriveCmd `cmd:"" help:"Like redrive, with the bq-replay-bypass marker, so handlers can skip external side effects."`
	Purge   purgeCmd   `cmd:"" help:"Delete the messages of a dead-letter queue (needs --yes)."`
}

// command is the parsed command with what it needs.
type command struct {
	name    string // peek, count, redrive, replay, purge
	filters filterFlags
	filter  filter
	dryRun  bool
	to      string
	headers bool
}

var errHelp = errors.New("help shown")

type kongExit struct{ code int }

func parse(args []string, stdout io.Writer) (c cli, cmd command, err error) {
	parser, err := kong.New(&c, kong.Name("bq"),
		kong.Description("Look into and drain BabelQueue dead-letter queues on Kafka, SQS, Pulsar and Service Bus."),
		kong.Writers(stdout, stdout),
		kong.Exit(func(code int) { panic(kongExit{code}) }),
		kong.UsageOnError(),
	)
	if err != nil {
		return c, cmd, err
	}
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(kongExit); ok {
				if e.code == 0 {
					err = errHelp
				} else {
					err = fmt.Errorf("invalid command line")
				}
				return
			}
			panic(r)
		}
	}()
	kctx, err := parser.Parse(args)
	if err != nil {
		return c, cmd, usagef("%v", err)
	}
	name := strings.Fields(kctx.Command())[0]
	cmd.name = name
	switch name {
	case "peek":
		cmd.filters, cmd.headers = c.Peek.filterFlags, c.Peek.Headers
	case "count":
		cmd.filters = c.Count.filterFlags
	case "redrive":
		cmd.filters, cmd.dryRun, cmd.to = c.Redrive.filterFlags, c.Redrive.DryRun, c.Redrive.To
	case "replay":
		cmd.filters, cmd.dryRun, cmd.to = c.Replay.filterFlags, c.Replay.DryRun, c.Replay.To
	case "purge":
		cmd.filters, cmd.dryRun = c.Purge.filterFlags, c.Purge.DryRun
		if !c.Purge.Yes && !c.Purge.DryRun {
			return c, cmd, usagef("purge deletes messages for good: pass --yes (or --dry-run to see which)")
		}
	}
	if cmd.filters.Limit < 0 {
		return c, cmd, usagef("--limit %d: want 0 (every message) or more", cmd.filters.Limit)
	}
	cmd.filter, err = newFilter(cmd.filters, time.Now())
	return c, cmd, err
}

// filter selects messages.
type filter struct {
	urns, reasons []string
	since, until  time.Time
}

func newFilter(f filterFlags, now time.Time) (filter, error) {
	out := filter{urns: f.URN, reasons: f.Reason}
	for _, p := range f.URN {
		if _, err := path.Match(p, ""); err != nil {
			return out, usagef("--urn %q: %v", p, err)
		}
	}
	var err error
	if out.since, err = parseTime("--since", f.Since, now); err != nil {
		return out, err
	}
	if out.until, err = parseTime("--until", f.Until, now); err != nil {
		return out, err
	}
	return out, nil
}

func parseTime(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("%s %q: want an RFC 3339 time (2026-12-03T10:00:00Z) or a duration ago (90m)", flag, v)
}

func (f filter) match(it *item) bool {
	if len(f.urns) > 0 {
		ok := false
		for _, p := range f.urns {
			if m, _ := path.Match(p, it.urn); m && it.urn != "" {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	if len(f.reasons) > 0 {
		ok := false
		for _, r := range f.reasons {
			ok = ok || strings.EqualFold(r, it.reason)
		}
		if !ok {
			return false
		}
	}
	if !f.since.IsZero() || !f.until.IsZero() {
		if it.failedAt.IsZero() {
			return false
		}
		if !f.since.IsZero() && it.failedAt.Before(f.since) {
			return false
		}
		if !f.until.IsZero() && !it.failedAt.Before(f.until) {
			return false
		}
	}
	return true
}
