#!/usr/bin/env bash
# make test: every module's tests with -race, one module at a time so a long
# run shows where it is (the module, then its result and time), and a summary
# at the end of every test that skipped, with the reason it gave (which names
# the command that starts the missing server).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=${GOFLAGS:--buildvcs=false}
skips=$(mktemp)
report=$(mktemp -d)/testreport
trap 'rm -f "$skips" "$report"' EXIT
go build -o "$report" ./tools/testreport
status=0
for m in "$@"; do
	echo "== $m"
	start=$(date +%s)
	if go test -race -count=1 -json "./$m/..." 2>&1 | "$report" -skips "$skips"; then
		echo "== $m: ok ($(( $(date +%s) - start ))s)"
	else
		echo "== $m: FAILED ($(( $(date +%s) - start ))s)"
		status=1
	fi
done
echo
"$report" -summarize "$skips"
exit $status
