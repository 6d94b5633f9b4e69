#!/usr/bin/env bash
# Builds the .deb and .rpm packages of pcapsync into OUT (default
# out/package) with nfpm, pinned here and run as a Go module: the
# binary (version and commit stamped), the systemd units, the example
# configuration (conffiles under /etc/pcapsync), the manual pages and the
# bash, zsh and fish completions. docs/packaging.md describes the
# packages and how they install and purge.
#
#   scripts/package.sh [OUT]
#
# The version is $PCAPSYNC_VERSION if set, else the newest tag vX.Y.Z
# reachable from HEAD (X.Y.Z, with ~gitDATE.COMMIT after it when HEAD is
# past the tag), else 0.0.0~gitDATE.COMMIT.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$(mkdir -p "${1:-out/package}" && cd "${1:-out/package}" && pwd)

# nfpm: later releases need modules that are not on every proxy
# (go.digitalxero.dev); v2.45.0 builds from proxy.golang.org alone.
nfpm=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.0

commit=$(git rev-parse HEAD 2>/dev/null || echo "")
if [ -n "${PCAPSYNC_VERSION:-}" ]; then
	version=$PCAPSYNC_VERSION
elif [ -n "$commit" ]; then
	when=$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd)
	snapshot="git$when.$(git rev-parse --short=12 HEAD)"
	if tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null); then
		version=${tag#v}
		[ "$(git rev-list -n1 "$tag")" = "$commit" ] || version="$version~$snapshot"
	else
		version="0.0.0~$snapshot"
	fi
	[ -z "$(git status --porcelain --untracked-files=no)" ] || version="$version.dirty"
else
	echo "package.sh: not a git checkout: set PCAPSYNC_VERSION" >&2
	exit 2
fi
case $version in
[0-9]*) ;;
*) echo "package.sh: version $version must start with a digit" >&2; exit 2 ;;
esac

stage=$(mktemp -d "${TMPDIR:-/tmp}/pcapsync-package.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/man" "$stage/build/completions"
cp -r deploy "$stage/deploy"

echo "== building pcapsync $version"
CGO_ENABLED=1 go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X main.stampVersion=$version -X main.stampCommit=$commit" \
	-o "$stage/build/pcapsync" ./cmd/pcapsync
bin="$stage/build/pcapsync"
"$bin" gen man --dir "$stage/build/man" >/dev/null
gzip -9n "$stage"/build/man/*.1
"$bin" completion bash >"$stage/build/completions/pcapsync.bash"
"$bin" completion zsh >"$stage/build/completions/_pcapsync"
"$bin" completion fish >"$stage/build/completions/pcapsync.fish"

# nfpm reads the version and architecture from the environment, and the
# contents relative to its working directory: the stage.
export PCAPSYNC_VERSION=$version PCAPSYNC_ARCH=$(go env GOARCH)
for p in deb rpm; do
	(cd "$stage" && go run "$nfpm" package --config deploy/nfpm.yaml --packager "$p" --target "$out/")
done
