#!/usr/bin/env bash
# Builds crictl (kubernetes-sigs/cri-tools) from a local git mirror with its vendored modules,
# no network, and prints the binary's path on stdout (progress goes to stderr).
#
# usage: tests/cri/build-crictl.sh
#   VETTO_CRI_TOOLS_GIT  the mirror (default /work/.mirror/kubernetes-sigs+cri-tools/repo)
#   VETTO_CRI_TOOLS_REV  the tag or commit (default v1.26.1, the last release that builds
#                        with Debian 12's Go 1.19)
#   VETTO_CRI_CACHE      where the binary goes (default /var/cache/vetto-cri): $VETTO_CRI_CACHE/crictl,
#                        reused when it is there and reports that version
# Exit status: 0 built or reused; 2 build error; 77 no mirror, revision or Go (skip).
set -euo pipefail

GIT=${VETTO_CRI_TOOLS_GIT:-/work/.mirror/kubernetes-sigs+cri-tools/repo}
REV=${VETTO_CRI_TOOLS_REV:-v1.26.1}
CACHE=${VETTO_CRI_CACHE:-/var/cache/vetto-cri}
BIN=$CACHE/crictl
VERSION=${REV#v}

skip() { echo "build-crictl.sh: SKIP: $*" >&2; exit 77; }
die() { echo "build-crictl.sh: $*" >&2; exit 2; }

reuse() {
  if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -qxF "crictl version $VERSION"; then
    echo "build-crictl.sh: reusing $BIN ($("$BIN" --version))" >&2
    echo "$BIN"
    exit 0
  fi
}
reuse

git --git-dir="$GIT" rev-parse -q --verify HEAD >/dev/null 2>&1 || skip "no cri-tools git mirror at $GIT.
  Get one: git clone --mirror https://github.com/kubernetes-sigs/cri-tools <dir>
  and point VETTO_CRI_TOOLS_GIT at <dir>."
COMMIT=$(git --git-dir="$GIT" rev-parse -q --verify "$REV^{commit}") ||
  skip "$GIT has no $REV (fetch the tags, or set VETTO_CRI_TOOLS_REV)"
command -v go >/dev/null || skip "no Go toolchain: apt-get install golang-go"

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
reuse # built meanwhile by another run
tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
t0=$SECONDS
echo "build-crictl.sh: building crictl $REV (${COMMIT:0:12}) with $(go version | cut -d' ' -f3)" >&2
git --git-dir="$GIT" archive "$COMMIT" | tar -x -C "$tmp/" || die "git archive failed"
(
  cd "$tmp"
  export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local GO111MODULE=on CGO_ENABLED=0 \
    GOCACHE="$tmp/.gocache" GOPATH="$tmp/.gopath"
  go build -trimpath -ldflags "-X github.com/kubernetes-sigs/cri-tools/pkg/version.Version=$VERSION" \
    -o "$tmp/crictl.new" ./cmd/crictl
) >&2 || die "go build failed"
mv -f "$tmp/crictl.new" "$BIN"
echo "build-crictl.sh: built $BIN in $((SECONDS - t0))s ($("$BIN" --version))" >&2
echo "$BIN"
