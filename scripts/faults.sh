#!/usr/bin/env bash
# make faults: the shared fault suite (core/drivertest.RunFaults) on every
# server it can reach, printed as one table:
#
#   broker server scenario sent handled acked dead_lettered duplicates lost gap_ratio window
#
# Kafka runs on in-process kfake, then on a real broker that this script
# starts with scripts/kafka-server.sh (and the suite kills with kill -9 and
# resumes on its data); BQ_CACHE_DIR and BQ_KAFKA_PORT are honoured.
# BQ_FAULTS_SKIP_REAL=1 leaves out the real broker.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/..
cd "$root"
export GOFLAGS=${GOFLAGS:--buildvcs=false}
out=$(mktemp)
logs=$(mktemp -d)
started=""
cleanup() {
	if [ -n "$started" ]; then scripts/kafka-server.sh stop >/dev/null 2>&1 || true; fi
	rm -f "$out"
}
trap cleanup EXIT

status=0
run() { # run NAME ENV... -- PKG
	local name=$1
	shift
	echo "faults: $name" >&2
	if ! env BQ_FAULTS_OUT="$out" "$@" go test -count=1 -run '^TestFaults$' -v ./kafka/ >"$logs/$name.log" 2>&1; then
		echo "faults: $name FAILED; its log:" >&2
		grep -E -- '--- FAIL|faults.go|Error' "$logs/$name.log" | head -40 >&2
		status=1
	fi
}

run kafka-kfake
if [ "${BQ_FAULTS_SKIP_REAL:-}" != 1 ]; then
	if ! scripts/kafka-server.sh env >/dev/null || ! (exec 3<>"/dev/tcp/127.0.0.1/${BQ_KAFKA_PORT:-19092}") 2>/dev/null; then
		scripts/kafka-server.sh start
		started=1
	fi
	run kafka-broker "$(scripts/kafka-server.sh env)" BQ_KAFKA_SERVER_SCRIPT="$here/kafka-server.sh"
fi

echo
echo "broker server scenario sent handled acked dead_lettered duplicates lost gap_ratio window"
cat "$out"
exit $status
