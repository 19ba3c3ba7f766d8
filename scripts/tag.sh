#!/usr/bin/env bash
# Tags modules for release, in dependency order:
#
#   scripts/tag.sh kafka v0.2.0
#   scripts/tag.sh core v0.2.0 kafka v0.2.0 sqs v0.2.0
#
# Every check runs for every module before any tag is made, so a refusal
# changes nothing: the module exists, the version is semver and newer than
# the module's last tag, the tree is clean, the CHANGELOG has a section for
# it, every sibling the module's go.mod requires names a version that is
# tagged already (or tagged earlier in the same call), and the module's
# tests pass outside the workspace (GOWORK=off, -mod=readonly), as its users
# build it. Modules are tagged conformance → core → the broker modules.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=github.com/babelqueue/transports
order=(conformance core kafka sqs pulsar azureservicebus otel cmd/bq idempotency/redis idempotency/postgres outbox/postgres)

die() { echo "tag: $*" >&2; exit 1; }

if [ $# -eq 0 ] || [ $(($# % 2)) -ne 0 ]; then
	echo "usage: scripts/tag.sh MODULE VERSION [MODULE VERSION ...]  (make tag MODULE=kafka VERSION=v0.2.0)" >&2
	exit 2
fi
declare -A want
while [ $# -gt 0 ]; do
	[ -f "$1/go.mod" ] || die "$1 is not a module of this repository"
	[[ $2 =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
		die "$2 is not a semver version (vMAJOR.MINOR.PATCH)"
	want[$1]=$2
	shift 2
done
[ -z "$(git status --porcelain)" ] || die "the work tree is not clean"

# The modules asked for, in dependency order.
todo=()
for m in "${order[@]}"; do
	if [ -n "${want[$m]:-}" ]; then todo+=("$m"); fi
done
for m in "${!want[@]}"; do
	case " ${todo[*]} " in *" $m "*) ;; *) todo+=("$m") ;; esac
done

declare -A planned
for m in "${todo[@]}"; do
	v=${want[$m]}
	tag="$m/$v"
	if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then die "$tag exists already"; fi
	latest=$(git tag --list "$m/v*" --sort=-v:refname | head -n 1)
	if [ -n "$latest" ]; then
		newest=$(printf '%s\n%s\n' "${latest#"$m/"}" "$v" | sort -V | tail -n 1)
		[ "$newest" = "$v" ] || die "$v is not newer than $latest"
	fi
	grep -q "^## \[${v#v}\]" "$m/CHANGELOG.md" 2>/dev/null || die "$m/CHANGELOG.md has no section for ${v#v}"
	# Sibling requirements must name released versions: tagged, or tagged
	# before this module in this call.
	while read -r dep dv; do
		s=${dep#"$prefix/"}
		if git rev-parse -q --verify "refs/tags/$s/$dv" >/dev/null; then continue; fi
		if [ "${planned[$s]:-}" = "$dv" ]; then continue; fi
		die "$m requires $s $dv, which is not tagged; tag $s/$dv first (or in the same call, before $m)"
	done < <(cd "$m" && GOWORK=off go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all 2>/dev/null | grep "^$prefix/" || true)
	planned[$m]=$v
done

for m in "${todo[@]}"; do
	echo "tag: testing $m outside the workspace"
	(cd "$m" && GOWORK=off go test -mod=readonly -short -count=1 ./...) || die "$m: tests failed outside the workspace"
done
for m in "${todo[@]}"; do
	git tag -a "$m/${want[$m]}" -m "$m ${want[$m]}"
	echo "tagged $m/${want[$m]}; push it with: git push origin $m/${want[$m]}"
done
