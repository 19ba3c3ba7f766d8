#!/usr/bin/env bash
# go mod tidy for every module of the workspace. go mod tidy ignores go.work,
# and the sibling modules' versions are not published yet, so each module gets
# temporary replace directives to the local siblings for the duration of the
# tidy; they are dropped again, and the committed go.mod files never carry one.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=github.com/babelqueue/transports
siblings=(core conformance)
for m in "$@"; do
	echo "tidy $m"
	(
		cd "$m"
		for s in "${siblings[@]}"; do
			[ "$s" = "$m" ] || go mod edit -replace="$prefix/$s=../$s"
		done
		trap 'for s in "${siblings[@]}"; do go mod edit -dropreplace="$prefix/$s" 2>/dev/null || true; done' EXIT
		go mod tidy
	)
done
