module github.com/babelqueue/transports/idempotency/redis

go 1.26.0

require (
	github.com/babelqueue/transports/core v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/babelqueue/transports/conformance => ../../conformance
	github.com/babelqueue/transports/core => ../../core
)
