module github.com/babelqueue/transports/idempotency/postgres

go 1.25.0

require (
	github.com/babelqueue/transports/core v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace (
	github.com/babelqueue/transports/conformance => ../../conformance
	github.com/babelqueue/transports/core => ../../core
)
