#!/usr/bin/env bash
# Runs a PostgreSQL 15 server (Debian's postgresql) on 127.0.0.1 for the
# idempotency/postgres module's tests, with its data in a temporary
# directory. PostgreSQL refuses to run as root, so the server runs as the
# user nobody, owning its data directory.
#
#   scripts/postgres-server.sh install  apt-get install postgresql when missing
#   scripts/postgres-server.sh start    install if needed, initdb, start, wait
#   scripts/postgres-server.sh stop     stop it and delete its data
#   scripts/postgres-server.sh env      print BQ_POSTGRES_PORT=...
#
# The port is BQ_POSTGRES_PORT (default 15432); the superuser is postgres with
# trust authentication on loopback, database postgres. The log lives under
# $BQ_CACHE_DIR/postgres (default .cache/postgres); the data directory is a
# fresh one under /tmp (recorded there), which the user nobody can reach
# wherever the checkout is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
cache=${BQ_CACHE_DIR:-$here/../.cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
dir=$cache/postgres
port=${BQ_POSTGRES_PORT:-15432}
bin=""
log=$dir/postgres.log
state=$dir/datadir # the path of the data directory of the running server

find_bin() {
	bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
}

install() {
	find_bin
	if [ -n "$bin" ] && [ -x "$bin/initdb" ]; then return; fi
	echo "postgres-server.sh: installing Debian's postgresql" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	find_bin
}

as_owner() {
	if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi
}

ready() { as_owner "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; }

start() {
	install
	if [ -f "$state" ] && [ -f "$(cat "$state")/data/postmaster.pid" ] && ready; then
		echo "postgres-server.sh: already running on 127.0.0.1:$port" >&2
		return
	fi
	stop
	mkdir -p "$dir"
	local data
	data=$(mktemp -d /tmp/bq-postgres.XXXXXX)
	echo "$data" >"$state"
	mkdir -p "$data/data" "$data/sock"
	touch "$log"
	if [ "$(id -u)" = 0 ]; then chown -R nobody:nogroup "$data" "$log"; fi
	as_owner "$bin/initdb" -D "$data/data" -U postgres --auth=trust >"$dir/initdb.log" 2>&1
	as_owner "$bin/pg_ctl" -D "$data/data" -l "$log" -w -t 60 \
		-o "-p $port -k $data/sock -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
	head -n 1 "$data/data/postmaster.pid" >"$dir/postgres.pid"
	wait_ready "$dir/postgres.pid" "$log" 30 ready
	echo "postgres-server.sh: ready on 127.0.0.1:$port (user postgres, database postgres)" >&2
}

stop() {
	find_bin
	if [ -f "$state" ]; then
		local data
		data=$(cat "$state")
		if [ -n "$bin" ] && [ -f "$data/data/postmaster.pid" ]; then
			as_owner "$bin/pg_ctl" -D "$data/data" -m fast -w stop >/dev/null 2>&1 || true
		fi
		case "$data" in /tmp/bq-postgres.*) rm -rf "$data" ;; esac
	fi
	rm -rf "$dir"
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
env) echo "BQ_POSTGRES_PORT=$port" ;;
*) echo "usage: $0 install|start|stop|env" >&2; exit 2 ;;
esac
