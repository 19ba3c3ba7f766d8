// Package outbox is a transactional outbox on PostgreSQL (pgx v5): a
// service writes its data and the messages announcing it in one database
// transaction, and a Relay publishes the messages afterwards through any
// driver.Sender, so a crash between the two can neither lose a message nor
// publish one for a change that was rolled back.
//
//	tx, _ := pool.Begin(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders …`)
//	_, _ = outbox.Publish(ctx, tx, "orders", "urn:babel:orders:created", order)
//	_ = tx.Commit(ctx)
//
//	relay := outbox.NewRelay(pool, sender)
//	go relay.Run(ctx)
//
// Delivery is at least once: a row is marked sent only after the broker
// accepted its message, so a relay that dies between the two sends that
// row again (the consumer's idempotency store absorbs the duplicate).
// Several relays can run at once: each takes its rows with FOR UPDATE SKIP
// LOCKED, so in the normal case no row is sent by two of them.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/babelqueue/transports/core"
	"github.com/babelqueue/transports/core/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTable is the outbox table unless WithTable says otherwise.
const DefaultTable = "bq_outbox"

var validTable = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func checkTable(t string) error {
	if !validTable.MatchString(t) {
		return fmt.Errorf("babelqueue/outbox: invalid table name %q", t)
	}
	return nil
}

// Execer is what Publish needs: a pgx.Tx (the caller's transaction), or a
// *pgxpool.Pool or *pgx.Conn for a publish outside one.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MigrationSQL is the DDL of the outbox table, for users who run
// migrations themselves.
func MigrationSQL(table string) string {
	idx := regexp.MustCompile(`\W`).ReplaceAllString(table, "_")
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	id          bigserial PRIMARY KEY,
	queue       text NOT NULL,
	msg_key     text NOT NULL DEFAULT '',
	headers     jsonb,
	body        bytea NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now(),
	sent_at     timestamptz,
	attempts    integer NOT NULL DEFAULT 0,
	last_error  text,
	undecodable boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS %[2]s_pending ON %[1]s (id) WHERE sent_at IS NULL AND NOT undecodable;`, table, idx)
}

// Migrate creates the outbox table (default DefaultTable) and its index
// when they are missing.
func Migrate(ctx context.Context, db Execer, table string) error {
	if table == "" {
		table = DefaultTable
	}
	if err := checkTable(table); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, MigrationSQL(table)); err != nil {
		return fmt.Errorf("babelqueue/outbox: migrate: %w", err)
	}
	return nil
}

// PublishOption configures one Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	table   string
	key     string
	headers map[string]string
	envOpts []core.Option
}

// WithTable writes to this outbox table (default DefaultTable).
func WithTable(name string) PublishOption { return func(c *publishConfig) { c.table = name } }

// WithKey sets the ordering/partition key the message is published with.
func WithKey(key string) PublishOption { return func(c *publishConfig) { c.key = key } }

// WithHeader adds an extra transport header (traceparent, …).
func WithHeader(name, value string) PublishOption {
	return func(c *publishConfig) {
		if c.headers == nil {
			c.headers = map[string]string{}
		}
		c.headers[name] = value
	}
}

// WithEnvelopeOptions passes options to core.New (WithTraceID,
// WithMessageID, …).
func WithEnvelopeOptions(opts ...core.Option) PublishOption {
	return func(c *publishConfig) { c.envOpts = append(c.envOpts, opts...) }
}

// Publish builds the envelope for urn and data on queue (as
// queue.Publisher.Publish does) and inserts it into the outbox through tx,
// the caller's transaction: it is published by a Relay once tx commits,
// and never if tx rolls back. It returns the envelope, whose Meta.ID the
// consumer sees.
func Publish(ctx context.Context, tx Execer, queue, urn string, data any, opts ...PublishOption) (*core.Envelope, error) {
	cfg := publishConfig{table: DefaultTable}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkTable(cfg.table); err != nil {
		return nil, err
	}
	env, err := core.New(urn, data, append(cfg.envOpts, core.WithQueue(queue))...)
	if err != nil {
		return nil, err
	}
	body, err := env.Encode()
	if err != nil {
		return nil, err
	}
	var headers []byte
	if len(cfg.headers) > 0 {
		if headers, err = json.Marshal(cfg.headers); err != nil {
			return nil, fmt.Errorf("babelqueue/outbox: headers: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+cfg.table+` (queue, msg_key, headers, body) VALUES ($1, $2, $3, $4)`,
		queue, cfg.key, headers, body); err != nil {
		return nil, fmt.Errorf("babelqueue/outbox: insert: %w", err)
	}
	return env, nil
}

// Beginner is what a Relay needs of the database: a *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Relay publishes the outbox's pending rows in id order through a
// driver.Sender and marks each sent once the broker accepted it.
type Relay struct {
	db        Beginner
	snd       driver.Sender
	table     string
	batch     int
	poll      time.Duration
	maxPause  time.Duration
	logger    *slog.Logger
	onError   func(error)
	afterSend func(ctx context.Context) error // tests: a crash between send and mark
}

// RelayOption configures a Relay.
type RelayOption func(*Relay)

// WithRelayTable reads this outbox table (default DefaultTable).
func WithRelayTable(name string) RelayOption { return func(r *Relay) { r.table = name } }

// WithBatchSize sets how many rows one round takes (default 100).
func WithBatchSize(n int) RelayOption {
	return func(r *Relay) {
		if n > 0 {
			r.batch = n
		}
	}
}

// WithPollInterval sets how long the relay waits when nothing is pending
// (default 200ms).
func WithPollInterval(d time.Duration) RelayOption {
	return func(r *Relay) {
		if d > 0 {
			r.poll = d
		}
	}
}

// WithMaxBackoff bounds the pause after a failed round, which doubles from
// the poll interval (default 30s): a broker that is down is not hammered.
func WithMaxBackoff(d time.Duration) RelayOption {
	return func(r *Relay) {
		if d > 0 {
			r.maxPause = d
		}
	}
}

// WithRelayLogger logs to l (default slog.Default()).
func WithRelayLogger(l *slog.Logger) RelayOption { return func(r *Relay) { r.logger = l } }

// WithErrorHandler receives every error of a round (a failed publish, an
// undecodable row, the database) besides the log.
func WithErrorHandler(fn func(error)) RelayOption { return func(r *Relay) { r.onError = fn } }

// NewRelay returns a Relay reading db's outbox and publishing through snd.
func NewRelay(db Beginner, snd driver.Sender, opts ...RelayOption) *Relay {
	r := &Relay{db: db, snd: snd, table: DefaultTable, batch: 100, poll: 200 * time.Millisecond, maxPause: 30 * time.Second}
	for _, o := range opts {
		o(r)
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	return r
}

// RoundResult says what one round did.
type RoundResult struct {
	// Sent rows were accepted by the broker and marked sent.
	Sent int
	// Failed rows could not be published; they stay pending.
	Failed int
	// Undecodable rows are reported and left in place, marked so they are
	// not taken again.
	Undecodable int
	// Rejected rows are envelopes the broker can never take (larger than
	// its size limit): reported and left in place, marked as undecodable
	// rows are, so that they are not taken again.
	Rejected int
}

// ErrUndecodableRow is reported (wrapped) for a row whose body is not an
// envelope; the row is left in the table with undecodable set.
var ErrUndecodableRow = errors.New("babelqueue/outbox: row is not an envelope")

// ErrRejectedRow is reported (wrapped, with the sender's error) for a row
// the broker can never take (driver.ErrRejected), such as one past its size
// limit (driver.ErrTooLarge) or, on SQS, one with more headers than SQS
// carries or a delay SQS cannot keep: the row is left in the table with undecodable set
// and the error in last_error, and is not taken again. Retried, it would
// fail every round and hold the relay at its longest backoff.
var ErrRejectedRow = errors.New("babelqueue/outbox: the broker cannot take the row")

// Run relays until ctx ends, pausing for the poll interval when nothing is
// pending and backing off (doubling up to the max backoff) after a failed
// round. It returns nil when ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	if err := checkTable(r.table); err != nil {
		return err
	}
	pause := r.poll
	for ctx.Err() == nil {
		res, err := r.Round(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil || res.Failed > 0:
			if err != nil {
				r.report(err)
			}
			pause = min(2*pause, r.maxPause)
		case res.Sent == r.batch:
			pause = r.poll
			continue // more may be pending: no pause
		default:
			pause = r.poll
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	return nil
}

func (r *Relay) report(err error) {
	r.logger.Warn("babelqueue/outbox: relay", slog.Any("error", err))
	if r.onError != nil {
		r.onError(err)
	}
}

type row struct {
	id      int64
	queue   string
	key     string
	headers []byte
	body    []byte
}

// Round relays one batch of pending rows in one transaction: the rows are
// locked (FOR UPDATE SKIP LOCKED), published, and the accepted ones marked
// sent before the commit.
func (r *Relay) Round(ctx context.Context) (RoundResult, error) {
	var res RoundResult
	if err := checkTable(r.table); err != nil {
		return res, err
	}
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("babelqueue/outbox: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	rows, err := tx.Query(ctx, `SELECT id, queue, msg_key, headers, body FROM `+r.table+`
		WHERE sent_at IS NULL AND NOT undecodable ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, r.batch)
	if err != nil {
		return res, fmt.Errorf("babelqueue/outbox: select: %w", err)
	}
	var pending []row
	for rows.Next() {
		var w row
		if err := rows.Scan(&w.id, &w.queue, &w.key, &w.headers, &w.body); err != nil {
			rows.Close()
			return res, fmt.Errorf("babelqueue/outbox: scan: %w", err)
		}
		pending = append(pending, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("babelqueue/outbox: select: %w", err)
	}
	if len(pending) == 0 {
		return res, nil
	}
	msgs := make([]*driver.Message, 0, len(pending))
	ids := make([]int64, 0, len(pending))
	var bad []int64
	for _, w := range pending {
		env, err := core.Decode(w.body, core.Quiet())
		if err != nil {
			r.report(fmt.Errorf("%w: id %d: %v", ErrUndecodableRow, w.id, err))
			bad = append(bad, w.id)
			continue
		}
		m := &driver.Message{Envelope: env, Body: w.body, Queue: w.queue, Key: w.key}
		if len(w.headers) > 0 {
			if err := json.Unmarshal(w.headers, &m.Headers); err != nil {
				r.report(fmt.Errorf("%w: id %d: headers: %v", ErrUndecodableRow, w.id, err))
				bad = append(bad, w.id)
				continue
			}
		}
		msgs = append(msgs, m)
		ids = append(ids, w.id)
	}
	if len(bad) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE `+r.table+` SET undecodable = true, last_error = 'not an envelope' WHERE id = ANY($1)`, bad); err != nil {
			return res, fmt.Errorf("babelqueue/outbox: mark undecodable: %w", err)
		}
		res.Undecodable = len(bad)
	}
	var sent, failed []int64
	var rejected []rejection
	var sendErr error
	if len(msgs) > 0 {
		sendErr = r.snd.Send(ctx, msgs)
		var be *driver.BatchError
		switch {
		case sendErr == nil:
			sent = ids
		case errors.As(sendErr, &be):
			for i, id := range ids {
				switch err := be.Failed(i); {
				case err == nil:
					sent = append(sent, id)
				case permanent(err):
					rejected = append(rejected, rejection{id, err})
				default:
					failed = append(failed, id)
				}
			}
		case len(ids) == 1 && permanent(sendErr):
			rejected = append(rejected, rejection{ids[0], sendErr})
		default:
			failed = ids
		}
	}
	if r.afterSend != nil {
		if err := r.afterSend(ctx); err != nil {
			return res, err // the transaction rolls back: as a crash would
		}
	}
	if len(sent) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE `+r.table+` SET sent_at = now(), attempts = attempts + 1, last_error = NULL WHERE id = ANY($1)`, sent); err != nil {
			return res, fmt.Errorf("babelqueue/outbox: mark sent: %w", err)
		}
	}
	if len(failed) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE `+r.table+` SET attempts = attempts + 1, last_error = $2 WHERE id = ANY($1)`,
			failed, core.TruncateError(sendErr.Error(), 1024)); err != nil {
			return res, fmt.Errorf("babelqueue/outbox: mark failed: %w", err)
		}
	}
	for _, rj := range rejected {
		if _, err := tx.Exec(ctx, `UPDATE `+r.table+` SET undecodable = true, attempts = attempts + 1, last_error = $2 WHERE id = $1`,
			rj.id, core.TruncateError(rj.err.Error(), 1024)); err != nil {
			return res, fmt.Errorf("babelqueue/outbox: mark rejected: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("babelqueue/outbox: commit: %w", err)
	}
	res.Sent, res.Failed, res.Rejected = len(sent), len(failed), len(rejected)
	for _, rj := range rejected {
		r.report(fmt.Errorf("%w: id %d: %w", ErrRejectedRow, rj.id, rj.err))
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("babelqueue/outbox: publishing %d of %d rows failed: %w", len(failed), len(ids), sendErr)
	}
	return res, nil
}

// rejection is a row the broker can never take, and why.
type rejection struct {
	id  int64
	err error
}

// permanent reports whether a publish failed for a reason no retry
// changes: the broker can never take the message as it is
// (driver.ErrRejected: past its size limit, with more headers than it
// carries, with a delay it cannot keep).
func permanent(err error) bool { return errors.Is(err, driver.ErrRejected) }

// Pending returns how many rows wait to be relayed (undecodable ones aside).
func Pending(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, table string) (int64, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := checkTable(table); err != nil {
		return 0, err
	}
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE sent_at IS NULL AND NOT undecodable`).Scan(&n)
	return n, err
}
