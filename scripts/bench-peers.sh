#!/usr/bin/env bash
# Runs the benchmarks module (this project against Watermill and the raw
# native clients) and prints each row as a ratio to this project.
#
#   scripts/bench-peers.sh                 Kafka on kfake; SQS on fauxqs when
#                                          scripts/sqs-server.sh installed it
#   PEERS_KAFKA=1 scripts/bench-peers.sh   also a real Kafka broker
#                                          (scripts/kafka-server.sh, started
#                                          here and stopped after)
#
# PEERS_COUNT (default 3) runs of every row; the table shows the medians.
# The raw output stays in bench-peers.txt.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
count=${PEERS_COUNT:-3}
stop=()
cleanup() {
	for s in "${stop[@]}"; do "$s" stop >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

if [ -z "${BQ_SQS_ENDPOINT:-}" ]; then
	if scripts/sqs-server.sh start >/dev/null 2>&1; then
		stop+=(scripts/sqs-server.sh)
		eval "export $(scripts/sqs-server.sh env)"
	else
		echo "bench-peers: no SQS server (scripts/sqs-server.sh install); SQS rows skipped" >&2
	fi
fi
if [ "${PEERS_KAFKA:-}" = 1 ] && [ -z "${BQ_KAFKA_BROKERS:-}" ]; then
	scripts/kafka-server.sh start
	stop+=(scripts/kafka-server.sh)
	eval "export $(scripts/kafka-server.sh env)"
fi

# One go test per count, each with the implementations in a rotated order, so
# that no implementation is always measured first (-count would repeat each
# one back to back in the same order).
echo "bench-peers: $count × go test -bench . -benchtime 1x ./benchmarks/ (Kafka: kfake${BQ_KAFKA_BROKERS:+, $BQ_KAFKA_BROKERS}; SQS: ${BQ_SQS_ENDPOINT:-none})" >&2
: >bench-peers.txt
for i in $(seq 0 $((count - 1))); do
	(cd benchmarks && BQ_PEERS_ROTATE=$i go test -run '^$' -bench . -benchtime 1x -count 1 -timeout 60m .) | tee -a bench-peers.txt >&2
done
(cd benchmarks && go run ./cmd/peertable) <bench-peers.txt
