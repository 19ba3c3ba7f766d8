module github.com/babelqueue/transports/examples

go 1.26.0

require (
	github.com/babelqueue/transports/core v0.1.0
	github.com/babelqueue/transports/kafka v0.1.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go v1.22.3 // indirect
	github.com/twmb/franz-go/pkg/kadm v1.20.0 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
)

replace (
	github.com/babelqueue/transports/conformance => ../conformance
	github.com/babelqueue/transports/core => ../core
	github.com/babelqueue/transports/kafka => ../kafka
)
