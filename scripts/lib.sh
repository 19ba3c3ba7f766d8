# Shared by the *-server.sh scripts; source it, do not run it.

# maven_resolve POM LIBS WHAT: copy the runtime dependencies of POM into LIBS
# once (a marker file records completion).
maven_resolve() {
	local pom=$1 libs=$2 what=$3
	if [ -f "$libs/.complete" ]; then return; fi
	mkdir -p "$libs"
	echo "$(basename "$0"): resolving $what from Maven Central" >&2
	mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$libs" -DincludeScope=runtime >&2
	touch "$libs/.complete"
}

# wait_ready PIDFILE LOG SECONDS CHECK...: poll CHECK every half second until
# it succeeds; fail with the log's tail when the process dies or time runs out.
wait_ready() {
	local pidfile=$1 log=$2 seconds=$3
	shift 3
	local i
	for i in $(seq 1 $((seconds * 2))); do
		if "$@"; then
			return 0
		fi
		if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			echo "$(basename "$0"): the server exited; log follows" >&2
			tail -n 60 "$log" >&2
			return 1
		fi
		sleep 0.5
	done
	echo "$(basename "$0"): not ready after ${seconds}s; log follows" >&2
	tail -n 60 "$log" >&2
	return 1
}

# stop_pid PIDFILE: stop the process, waiting up to 30s before SIGKILL.
stop_pid() {
	local pidfile=$1
	[ -f "$pidfile" ] || return 0
	local pid i
	pid=$(cat "$pidfile")
	kill "$pid" 2>/dev/null || true
	for i in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$pidfile"
}

# kill_pid PIDFILE: kill -9 the process as a crash would (its data stays).
kill_pid() {
	local pidfile=$1
	[ -f "$pidfile" ] || { echo "$(basename "$0"): not running" >&2; return 0; }
	local pid
	pid=$(cat "$pidfile")
	kill -9 "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	rm -f "$pidfile"
	echo "$(basename "$0"): killed with SIGKILL (data kept)" >&2
}

# running PIDFILE: whether the recorded process is alive.
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
