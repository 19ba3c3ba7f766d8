#!/usr/bin/env bash
# go mod tidy for every module named, each on its own (GOWORK=off): every
# go.mod requires its siblings at their released versions and replaces them
# with the sibling directories, so a module's own builds and tests use the
# code beside it while its dependents, which ignore replace directives, get
# the released versions.
set -euo pipefail
cd "$(dirname "$0")/.."
for m in "$@"; do
	echo "tidy $m"
	(cd "$m" && GOWORK=off go mod tidy)
done
