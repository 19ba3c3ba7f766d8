// Package azureservicebus is the Azure Service Bus transport of BabelQueue,
// built on github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus. It
// implements the driver interfaces of
// github.com/babelqueue/transports/core/driver for the runtime in core/queue.
//
// Binding (SPEC §2, ASB column): the body is the envelope bytes; Subject =
// the URN, CorrelationID = trace_id, MessageID = meta.id, ContentType =
// application/json, and the application properties bq-schema-version (int),
// bq-created-at (long, ms) and bq-source-lang (string) as native AMQP types.
// On consume, attempts = max(body, DeliveryCount − 1); the schema-version
// gate accepts any AMQP integer 1 and the strings of the gate, and rejects
// everything else, floats included.
//
// Messages are received in peek-lock mode; their locks are renewed from
// receipt until they are settled, and a lost lock is reported, never a silent
// second settlement. Retries abandon natively (DeliveryCount rises) or
// republish; dead letters go natively to the entity's dead-letter sub-queue
// with reason and description, or as annotated copies to "<queue>.dlq".
//
// Session-enabled entities are read with a SessionReceiver, which holds
// several sessions at once and hands each one's messages over one at a
// time, in order, keeping that order across native retries; the Sender
// puts a message's key in its SessionID.
package azureservicebus
