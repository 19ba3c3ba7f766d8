// Package postgres is a shared idempotency store on PostgreSQL, built on
// github.com/jackc/pgx/v5. It implements idempotency.Claimer with one table:
// a claim is one INSERT … ON CONFLICT DO UPDATE that only takes a row whose
// lease has ended (atomic across every consumer of the database), and
// Complete and Release only touch the caller's own claim. Keys are meta.id
// verbatim, stored as bytea (any bytes, NUL included).
//
//	pool, _ := pgxpool.New(ctx, "postgres://…")
//	store := postgres.New(pool)
//	if err := store.Migrate(ctx); err != nil { … } // or run store.MigrationSQL() yourself
//	c := queue.NewConsumer(rcv, snd, queue.WithMiddleware(idempotency.Middleware(store)))
package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/babelqueue/transports/core/idempotency"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTable is the table the Store uses unless WithTable says otherwise.
const DefaultTable = "bq_idempotency"

// DefaultTTL is how long a handled id is remembered by Cleanup unless
// WithTTL says otherwise.
const DefaultTTL = 7 * 24 * time.Hour

// DB is what the Store needs of a connection: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store is an idempotency.Claimer on PostgreSQL. It is safe for concurrent
// use when its DB is (a pool is).
type Store struct {
	db    DB
	table string
	ttl   time.Duration
}

// Option configures a Store.
type Option func(*Store)

// WithTable sets the table name (default DefaultTable); it may be
// schema-qualified ("app.bq_idempotency").
func WithTable(name string) Option { return func(s *Store) { s.table = name } }

// WithTTL sets how long Cleanup keeps a handled id (default DefaultTTL).
func WithTTL(d time.Duration) Option { return func(s *Store) { s.ttl = d } }

var validTable = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// New returns a Store on db, which the caller keeps ownership of. An
// invalid table name is reported as an error by every call.
func New(db DB, opts ...Option) *Store {
	s := &Store{db: db, table: DefaultTable, ttl: DefaultTTL}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ idempotency.Claimer = (*Store)(nil)

func (s *Store) check() error {
	if !validTable.MatchString(s.table) {
		return fmt.Errorf("babelqueue/idempotency/postgres: invalid table name %q", s.table)
	}
	return nil
}

// MigrationSQL is the DDL the Store needs, for users who run migrations
// themselves.
func (s *Store) MigrationSQL() string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
	key         bytea PRIMARY KEY,
	owner       text,
	lease_until timestamptz,
	done_at     timestamptz
);
CREATE INDEX IF NOT EXISTS %[2]s_done_at ON %[1]s (done_at);`, s.table, indexPrefix(s.table))
}

func indexPrefix(table string) string {
	out := []byte(table)
	for i, c := range out {
		if c == '.' {
			out[i] = '_'
		}
	}
	return string(out)
}

// Migrate creates the table and its index when they are missing.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, s.MigrationSQL()); err != nil {
		return fmt.Errorf("babelqueue/idempotency/postgres: migrate: %w", err)
	}
	return nil
}

// Seen implements idempotency.Store.
func (s *Store) Seen(ctx context.Context, key string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	var seen bool
	err := s.db.QueryRow(ctx, `SELECT done_at IS NOT NULL FROM `+s.table+` WHERE key = $1`, []byte(key)).Scan(&seen)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("babelqueue/idempotency/postgres: seen: %w", err)
	}
	return seen, nil
}

// Remember implements idempotency.Store.
func (s *Store) Remember(ctx context.Context, key string) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, `INSERT INTO `+s.table+` (key, done_at) VALUES ($1, now())
		ON CONFLICT (key) DO UPDATE SET done_at = now(), owner = NULL, lease_until = NULL`, []byte(key))
	if err != nil {
		return fmt.Errorf("babelqueue/idempotency/postgres: remember: %w", err)
	}
	return nil
}

// Forget implements idempotency.Store.
func (s *Store) Forget(ctx context.Context, key string) error {
	if err := s.check(); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, `DELETE FROM `+s.table+` WHERE key = $1`, []byte(key)); err != nil {
		return fmt.Errorf("babelqueue/idempotency/postgres: forget: %w", err)
	}
	return nil
}

// Claim implements idempotency.Claimer: the row is inserted, or taken over
// when it is neither done nor held under a live lease by another owner, in
// one statement.
func (s *Store) Claim(ctx context.Context, key, owner string, lease time.Duration) (idempotency.ClaimState, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var got string
	err := s.db.QueryRow(ctx, `INSERT INTO `+s.table+` AS t (key, owner, lease_until)
		VALUES ($1, $2, now() + $3 * interval '1 millisecond')
		ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, lease_until = EXCLUDED.lease_until
		WHERE t.done_at IS NULL AND (t.owner IS NULL OR t.owner = EXCLUDED.owner OR t.lease_until < now())
		RETURNING t.owner`, []byte(key), owner, max(lease.Milliseconds(), 1)).Scan(&got)
	switch {
	case err == nil:
		return idempotency.Claimed, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("babelqueue/idempotency/postgres: claim: %w", err)
	}
	seen, err := s.Seen(ctx, key)
	if err != nil {
		return 0, err
	}
	if seen {
		return idempotency.Done, nil
	}
	return idempotency.Busy, nil
}

// Complete implements idempotency.Claimer.
func (s *Store) Complete(ctx context.Context, key, owner string) error {
	if err := s.check(); err != nil {
		return err
	}
	var one int
	err := s.db.QueryRow(ctx, `INSERT INTO `+s.table+` AS t (key, done_at) VALUES ($1, now())
		ON CONFLICT (key) DO UPDATE SET done_at = now(), owner = NULL, lease_until = NULL
		WHERE t.done_at IS NOT NULL OR t.owner IS NULL OR t.owner = $2
		RETURNING 1`, []byte(key), owner).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return idempotency.ErrClaimLost
	}
	if err != nil {
		return fmt.Errorf("babelqueue/idempotency/postgres: complete: %w", err)
	}
	return nil
}

// Release implements idempotency.Claimer.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, `DELETE FROM `+s.table+` WHERE key = $1 AND owner = $2 AND done_at IS NULL`, []byte(key), owner)
	if err != nil {
		return fmt.Errorf("babelqueue/idempotency/postgres: release: %w", err)
	}
	return nil
}

// Cleanup deletes ids handled longer ago than the TTL, and claims whose
// lease ended more than the TTL ago, and returns how many rows went. Call
// it now and then (a cron job, a ticker).
func (s *Store) Cleanup(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM `+s.table+`
		WHERE done_at < now() - $1 * interval '1 millisecond'
		   OR (done_at IS NULL AND lease_until < now() - $1 * interval '1 millisecond')`, s.ttl.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("babelqueue/idempotency/postgres: cleanup: %w", err)
	}
	return tag.RowsAffected(), nil
}
