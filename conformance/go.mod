module github.com/babelqueue/transports/conformance

go 1.22
