#!/usr/bin/env bash
# Runs a Redis 7 server (Debian's redis-server) on 127.0.0.1 for the
# idempotency/redis module's tests, with its data in a temporary directory.
#
#   scripts/redis-server.sh install  apt-get install redis-server when missing
#   scripts/redis-server.sh start    install if needed, start, wait for PING
#   scripts/redis-server.sh stop     stop it and delete its data
#   scripts/redis-server.sh env      print BQ_REDIS_PORT=...
#
# The port is BQ_REDIS_PORT (default 16379); files live under
# $BQ_CACHE_DIR/redis (default .cache/redis).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
cache=${BQ_CACHE_DIR:-$here/../.cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
dir=$cache/redis
port=${BQ_REDIS_PORT:-16379}
pidfile=$dir/redis.pid
log=$dir/redis.log

install() {
	if command -v redis-server >/dev/null; then return; fi
	echo "redis-server.sh: installing Debian's redis-server" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
}

ready() { redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; }

start() {
	install
	if running "$pidfile"; then
		echo "redis-server.sh: already running (pid $(cat "$pidfile"))" >&2
		return
	fi
	rm -rf "$dir/data"
	mkdir -p "$dir/data"
	redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/data" --save "" --appendonly no \
		--daemonize yes --pidfile "$pidfile" --logfile "$log"
	for _ in $(seq 1 50); do [ -f "$pidfile" ] && break; sleep 0.1; done
	wait_ready "$pidfile" "$log" 20 ready
	echo "redis-server.sh: ready on 127.0.0.1:$port (pid $(cat "$pidfile"))" >&2
}

stop() {
	stop_pid "$pidfile"
	rm -rf "$dir/data"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
env) echo "BQ_REDIS_PORT=$port" ;;
*) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
