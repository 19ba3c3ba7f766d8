module github.com/babelqueue/transports/pulsar

go 1.26

require (
	github.com/apache/pulsar-client-go v0.19.0
	github.com/babelqueue/transports/conformance v0.1.0
	github.com/babelqueue/transports/core v0.1.0
)
