#!/usr/bin/env bash
# Runs a real Apache Pulsar standalone broker (RocksDB metadata store, one
# embedded bookie, no functions worker, no stream storage) on 127.0.0.1 for
# the pulsar module's integration tests.
#
#   scripts/pulsar-server.sh start    resolve (first time), start, wait until it serves
#   scripts/pulsar-server.sh stop     stop it and delete its data
#   scripts/pulsar-server.sh restart  stop it gracefully and start it again, keeping its data
#   scripts/pulsar-server.sh kill     kill -9 the broker by its recorded pid, keeping its data
#   scripts/pulsar-server.sh resume   start it again on the data a kill or restart kept
#   scripts/pulsar-server.sh env      print BQ_PULSAR_URL=...
#
# Needs Java 17+ and Maven; the broker's jars come from Maven Central
# (org.apache.pulsar:pulsar-broker:4.2.4) into $BQ_CACHE_DIR/pulsar/libs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
cache=${BQ_CACHE_DIR:-$here/../.cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
dir=$cache/pulsar
port=${BQ_PULSAR_PORT:-16650}
webport=${BQ_PULSAR_WEB_PORT:-18080}
pidfile=$dir/broker.pid
log=$dir/broker.log

ready() {
	curl -fsS "http://127.0.0.1:$webport/admin/v2/brokers/health" >/dev/null 2>&1
}

start() {
	if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "pulsar-server: already running (pid $(cat "$pidfile"))" >&2
		return
	fi
	maven_resolve "$here/pulsar/pom.xml" "$dir/libs" org.apache.pulsar:pulsar-broker:4.2.4
	rm -rf "$dir/data"
	mkdir -p "$dir/data"
	# The bookie reads its settings from this file too: listeningInterface=lo
	# keeps its RPC endpoint on loopback.
	cat >"$dir/standalone.conf" <<CONF
clusterName=standalone
brokerServicePort=$port
webServicePort=$webport
bindAddress=127.0.0.1
advertisedAddress=127.0.0.1
listeningInterface=lo
allowLoopback=true
httpServerEnabled=false
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
allowAutoTopicCreation=true
allowAutoTopicCreationType=non-partitioned
brokerDeleteInactiveTopicsEnabled=false
# exact acknowledgements inside producer batches (the Receiver asks for them)
acknowledgmentAtBatchIndexLevelEnabled=true
functionsWorkerEnabled=false
webSocketServiceEnabled=false
# test broker: no fsync per journal write (faster tests; not for production)
journalSyncData=false
CONF
	launch
}

# launch starts the broker on the data directory as it is.
launch() {
	nohup java -Xms256m -Xmx1g -cp "$dir/libs/*" org.apache.pulsar.PulsarStandaloneStarter \
		--config "$dir/standalone.conf" --no-functions-worker --no-stream-storage \
		--metadata-dir "$dir/data/metadata" --bookkeeper-dir "$dir/data/bk" \
		--advertised-address 127.0.0.1 >"$log" 2>&1 &
	echo $! >"$pidfile"
	wait_ready "$pidfile" "$log" 90 ready
	echo "pulsar-server: broker ready on pulsar://127.0.0.1:$port (pid $(cat "$pidfile"))" >&2
}

stop() {
	stop_pid "$pidfile"
	rm -rf "$dir/data"
}

resume() {
	if running "$pidfile"; then
		echo "pulsar-server: already running (pid $(cat "$pidfile"))" >&2
		return
	fi
	if [ ! -f "$dir/standalone.conf" ] || [ ! -d "$dir/data" ]; then
		echo "pulsar-server: no kept data to resume; use start" >&2
		exit 1
	fi
	launch
}

case "${1:-}" in
start) start ;;
stop) stop ;;
restart) stop_pid "$pidfile"; resume ;;
kill) kill_pid "$pidfile" ;;
resume) resume ;;
env) echo "BQ_PULSAR_URL=pulsar://127.0.0.1:$port" ;;
*) echo "usage: $0 start|stop|restart|kill|resume|env" >&2; exit 2 ;;
esac
