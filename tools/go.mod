module github.com/babelqueue/transports/tools

go 1.22
