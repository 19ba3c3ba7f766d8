#!/usr/bin/env bash
# Builds, vets and tests every module named on its own, outside the
# workspace (GOWORK=off) and with -mod=readonly, as a user's `go test` in the
# module directory would: each go.mod and go.sum must be complete by itself.
# -short leaves out the long fault suites (make faults runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly"
status=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for m in "$@"; do
	start=$(date +%s)
	log="$logs/${m//\//-}.log"
	if (cd "$m" && go vet ./... && go test -short -count=1 ./... >"$log" 2>&1); then
		echo "standalone $m: ok ($(grep '^go ' "$m/go.mod"), $(( $(date +%s) - start ))s)"
	else
		echo "standalone $m: FAILED" >&2
		tail -n 40 "$log" >&2
		status=1
	fi
done
exit $status
