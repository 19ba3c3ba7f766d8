#!/usr/bin/env bash
# make faults: the shared fault suite (core/drivertest.RunFaults) on every
# server it can reach, printed as one table:
#
#   broker server scenario sent handled acked dead_lettered duplicates lost gap_ratio window
#
# Kafka runs on in-process kfake, then on a real broker; Pulsar on a real
# broker; both brokers are started with scripts/*-server.sh when they are not
# running (and stopped again), and the suite kills them with kill -9 and
# resumes them on their data. SQS runs on the local server (fauxqs, started
# by its tests; scripts/sqs-server.sh install) and Service Bus on its AMQP
# test server (Debian's python3-qpid-proton); a module whose server is
# missing is reported and left out. BQ_CACHE_DIR and the BQ_*_PORT variables
# are honoured. BQ_FAULTS_SKIP_REAL=1 leaves out the Kafka and Pulsar brokers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/..
cd "$root"
export GOFLAGS=${GOFLAGS:--buildvcs=false}
out=$(mktemp)
logs=$(mktemp -d)
started=()
cleanup() {
	for s in "${started[@]}"; do scripts/"$s"-server.sh stop >/dev/null 2>&1 || true; done
	rm -f "$out"
}
trap cleanup EXIT

status=0
run() { # run NAME PKG ENV...
	local name=$1 pkg=$2
	shift 2
	echo "faults: $name" >&2
	if ! env BQ_FAULTS_OUT="$out" "$@" go test -count=1 -run '^TestFaults' -v "$pkg" >"$logs/$name.log" 2>&1; then
		echo "faults: $name FAILED; its log:" >&2
		grep -E -- '--- FAIL|faults.go|Error' "$logs/$name.log" | head -40 >&2
		status=1
	elif grep -q -- '--- SKIP: TestFaults ' "$logs/$name.log"; then
		echo "faults: $name skipped: $(grep -A1 -- '--- SKIP: TestFaults ' "$logs/$name.log" | tail -n 1 | sed 's/^ *//')" >&2
	fi
}

# up NAME PORT: start the broker unless something answers on PORT.
up() {
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then
		scripts/"$1"-server.sh start
		started+=("$1")
	fi
}

run kafka-kfake ./kafka/
if [ "${BQ_FAULTS_SKIP_REAL:-}" != 1 ]; then
	up kafka "${BQ_KAFKA_PORT:-19092}"
	run kafka-broker ./kafka/ "$(scripts/kafka-server.sh env)" BQ_KAFKA_SERVER_SCRIPT="$here/kafka-server.sh"
	up pulsar "${BQ_PULSAR_PORT:-16650}"
	run pulsar ./pulsar/ "$(scripts/pulsar-server.sh env)" BQ_PULSAR_SERVER_SCRIPT="$here/pulsar-server.sh"
fi
run sqs ./sqs/
run azureservicebus ./azureservicebus/

echo
echo "broker server scenario sent handled acked dead_lettered duplicates lost gap_ratio window"
cat "$out"
exit $status
