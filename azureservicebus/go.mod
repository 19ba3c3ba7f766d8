module github.com/babelqueue/transports/azureservicebus

go 1.25.0

require (
	github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus v1.11.0
	github.com/babelqueue/transports/conformance v0.1.0
	github.com/babelqueue/transports/core v0.1.0
)

require (
	github.com/Azure/azure-sdk-for-go/sdk/azcore v1.23.0 // indirect
	github.com/Azure/azure-sdk-for-go/sdk/internal v1.12.0 // indirect
	github.com/Azure/go-amqp v1.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace github.com/babelqueue/transports/core => ../core

replace github.com/babelqueue/transports/conformance => ../conformance
