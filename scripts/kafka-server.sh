#!/usr/bin/env bash
# Runs a real single-node Apache Kafka broker (KRaft, combined broker and
# controller) on 127.0.0.1 for the kafka module's integration tests.
#
#   scripts/kafka-server.sh start    resolve (first time), format, start, wait
#   scripts/kafka-server.sh stop     stop it and delete its data
#   scripts/kafka-server.sh restart  stop it gracefully and start it again, keeping its data
#   scripts/kafka-server.sh kill     kill -9 the broker by its recorded pid, keeping its data
#   scripts/kafka-server.sh resume   start it again on the data a kill or restart kept
#   scripts/kafka-server.sh env      print BQ_KAFKA_BROKERS=... for the tests
#
# Needs Java 17+ and Maven; the broker's jars come from Maven Central
# (org.apache.kafka:kafka_2.13:4.4.0) into $BQ_CACHE_DIR/kafka/libs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
cache=${BQ_CACHE_DIR:-$here/../.cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
dir=$cache/kafka
port=${BQ_KAFKA_PORT:-19092}
cport=${BQ_KAFKA_CONTROLLER_PORT:-19093}
pidfile=$dir/broker.pid
log=$dir/broker.log

ready() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

start() {
	if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "kafka-server: already running (pid $(cat "$pidfile"))" >&2
		return
	fi
	maven_resolve "$here/kafka/pom.xml" "$dir/libs" org.apache.kafka:kafka_2.13:4.4.0
	rm -rf "$dir/data"
	mkdir -p "$dir/data"
	format
	launch
}

# format writes the configuration and formats a fresh data directory.
format() {
	cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.consumer.min.session.timeout.ms=1000
group.min.session.timeout.ms=1000
PROPS
	local cp="$dir/libs/*"
	local id
	id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
	java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" >"$dir/format.log" 2>&1
}

# launch starts the broker on the data directory as it is.
launch() {
	local cp="$dir/libs/*"
	nohup java -Xms512m -Xmx1g -cp "$cp" kafka.Kafka "$dir/server.properties" >"$log" 2>&1 &
	echo $! >"$pidfile"
	wait_ready "$pidfile" "$log" 60 ready
	echo "kafka-server: broker ready on 127.0.0.1:$port (pid $(cat "$pidfile"))" >&2
}

stop() {
	stop_pid "$pidfile"
	rm -rf "$dir/data"
}

resume() {
	if running "$pidfile"; then
		echo "kafka-server: already running (pid $(cat "$pidfile"))" >&2
		return
	fi
	if [ ! -f "$dir/server.properties" ] || [ ! -d "$dir/data" ]; then
		echo "kafka-server: no kept data to resume; use start" >&2
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
env) echo "BQ_KAFKA_BROKERS=127.0.0.1:$port" ;;
*) echo "usage: $0 start|stop|restart|kill|resume|env" >&2; exit 2 ;;
esac
