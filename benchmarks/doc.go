// Package benchmarks compares the BabelQueue transports with what a Go user
// would pick instead, in one process, against the same servers: Watermill
// (watermill-kafka on Sarama) and the raw native clients (franz-go, the AWS
// SDK's SQS client).
//
// It holds benchmarks only, and no library module requires it. Run
//
//	make bench-peers
//
// from the repository root, which runs them and prints each row as a ratio
// to this project (see BENCHMARKS.md), or run them directly:
//
//	go test -run '^$' -bench . -benchtime 1x -count 3 ./benchmarks/
//
// Kafka rows run against an in-process kfake cluster, and also against a
// real broker when BQ_KAFKA_BROKERS is set; SQS rows run when
// BQ_SQS_ENDPOINT points at a local SQS server.
package benchmarks
