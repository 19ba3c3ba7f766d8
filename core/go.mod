module github.com/babelqueue/transports/core

go 1.24

require (
	github.com/babelqueue/transports/conformance v0.1.0
	github.com/google/uuid v1.6.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
)

require golang.org/x/text v0.14.0 // indirect

replace github.com/babelqueue/transports/conformance => ../conformance
