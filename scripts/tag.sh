#!/usr/bin/env bash
# Tags one module for release: scripts/tag.sh kafka v0.2.0 creates the
# annotated tag kafka/v0.2.0 after checking that the tree is clean, the
# version is new semver, the module's CHANGELOG names it, and its tests pass.
set -euo pipefail
module=${1:-}
version=${2:-}
if [ -z "$module" ] || [ -z "$version" ]; then
	echo "usage: make tag MODULE=<module> VERSION=vX.Y.Z" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
if [ ! -f "$module/go.mod" ]; then
	echo "tag: $module is not a module of this repository" >&2
	exit 2
fi
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "tag: $version is not a semver version (vMAJOR.MINOR.PATCH)" >&2
	exit 2
fi
if [ -n "$(git status --porcelain)" ]; then
	echo "tag: the work tree is not clean" >&2
	exit 1
fi
tag="$module/$version"
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
	echo "tag: $tag exists already" >&2
	exit 1
fi
latest=$(git tag --list "$module/v*" --sort=-v:refname | head -n 1)
if [ -n "$latest" ]; then
	newest=$(printf '%s\n%s\n' "${latest#"$module/"}" "$version" | sort -V | tail -n 1)
	if [ "$newest" != "$version" ]; then
		echo "tag: $version is not newer than $latest" >&2
		exit 1
	fi
fi
if ! grep -q "^## \[${version#v}\]" "$module/CHANGELOG.md"; then
	echo "tag: $module/CHANGELOG.md has no section for ${version#v}" >&2
	exit 1
fi
go test -race -count=1 "./$module/..."
git tag -a "$tag" -m "$module $version"
echo "tagged $tag; push it with: git push origin $tag"
