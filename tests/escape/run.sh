#!/usr/bin/env bash
# The escape suite on every tier this machine can run: `vetto run` (FULL) as root and as an
# unprivileged user (nobody, via setpriv), `vetto run --tier fs-only` (FS-ONLY) the same two
# ways, then vetto-shim hardened under Podman.
# Results: target/escape/<tier>.json and the combined table target/escape/results.md
# (`make escape-docs` copies it into docs/security-tests.md).
#
# usage: tests/escape/run.sh [target/debug]        (`make escape`, part of `make test`)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-$here/../../target/debug}")
out=$here/../../target/escape
mkdir -p "$out"
rm -f "$out"/*.json
rc=0
runs=()
run() {
  local name=$1
  shift
  echo "== escape suite: $name"
  python3 "$here/suite.py" "$@" --vetto "$bin/vetto" --shim "$bin/vetto-shim" --json "$out/$name.json" || rc=1
  runs+=("$out/$name.json")
}
if [ "$(id -u)" -eq 0 ]; then
  run full-root --tier full --mode root
  run full-rootless --tier full --mode rootless
  run fs-only-root --tier fs-only --mode root
  run fs-only-rootless --tier fs-only --mode rootless
  if command -v podman >/dev/null && command -v busybox >/dev/null; then
    run shim-podman --tier shim
  else
    echo "escape: shim tier SKIPPED (needs podman and busybox-static: make deps)"
  fi
else
  # Not root: the rootless tier is the caller itself; the shim tier needs root Podman.
  run full-rootless --tier full --mode rootless
  run fs-only-rootless --tier fs-only --mode rootless
  echo "escape: root and shim tiers SKIPPED (run as root for them)"
fi
python3 "$here/suite.py" --docs "${runs[@]}" >"$out/results.md"
echo "escape: results table in $(realpath "$out/results.md")"
exit $rc
