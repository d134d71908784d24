#!/usr/bin/env bash
# The OCI runtime-tools validation suite (github.com/opencontainers/runtime-tools,
# validation/*/: one program per test, printing TAP) against vetto-shim and reference runtimes.
#
# usage: tests/conformance/runtime-tools.sh [--runtime NAME=PATH]... [--test NAME]...
#            [--timeout SECS] [--results DIR] [--known FILE] [--reference NAME] [--gate NAME]
#            [--build-only]
#   default runtimes: vetto-shim=target/debug/vetto-shim crun=/usr/bin/crun runc=/usr/sbin/runc
#   (as root). Exit status: 0 ok; 1 when the gate runtime (vetto-shim) fails a TAP assertion,
#   or a whole test, that the reference (crun) passes and known-host-failures.txt does not
#   excuse; 2 usage or infrastructure error; 77 prerequisites missing (skip).
#
# Source: a git mirror of runtime-tools, $VETTO_RUNTIME_TOOLS_GIT (default
# /work/.mirror/opencontainers+runtime-tools/repo), at $VETTO_RUNTIME_TOOLS_REV (default
# 260e151, 2025-03: the newest commit that builds with Debian 12's Go 1.19; the next one,
# c2dadba, moves to github.com/moby/sys/capability, which needs Go 1.21's "slices"; what
# follows in validation/ is lint fixes and a time-namespace check). The suite is built once,
# with the vendored modules and no network, into
# ${VETTO_CONFORMANCE_CACHE:-/var/cache/vetto-conformance}/runtime-tools-<commit>/ (~20 s) and
# reused from there; the tests run from that directory (runtimetest, rootfs-amd64.tar.gz).
#
# Each runtime runs through a wrapper that gives it a private state root (--root), logs its
# command lines (calls.log) and, for vetto-shim, a private host configuration
# ($VETTO_SHIM_CONFIG; audit store in the work directory). The binary is copied first, so a
# rebuild during the run does not change the runtime under test. Bundles go to a private
# TMPDIR. After every test, containers left in the state root are force-deleted, bundles and
# cgroups the test left (the suite's /cgrouptest, testdir/cgrouptest, or a container id) are
# removed and recorded in <test>.leftover. Results: RESULTS/<runtime>/<test>.{tap,stderr,rc},
# report.txt (default target/conformance/runtime-tools-<time>/). tap_report.py compares; a
# test where the reference shares a failure of the gate runtime is run again on the reference
# (VETTO_CONFORMANCE_REF_RETRIES, default 2), as crun's hook runs are flaky (SIGPIPE); a
# failure of the gate runtime the reference does not share is run again as often, and gates
# only if it repeats (a pass on retry is reported as FLAKY).
#
# Hybrid cgroup hosts: crun refuses to run when the cgroup2 hierarchy (/sys/fs/cgroup/unified)
# holds controllers; it then runs in a private mount namespace without that mount (see below;
# VETTO_CONFORMANCE_HIDE_UNIFIED="NAME..." picks the runtimes, default crun).
set -uo pipefail

REV_DEFAULT=260e151b8552afa2678ef6d41820ea0f31cd8be1 # newest commit whose go.mod says go 1.19

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
GIT=${VETTO_RUNTIME_TOOLS_GIT:-/work/.mirror/opencontainers+runtime-tools/repo}
REV=${VETTO_RUNTIME_TOOLS_REV:-$REV_DEFAULT}
CACHE=${VETTO_CONFORMANCE_CACHE:-/var/cache/vetto-conformance}
TIMEOUT=${VETTO_CONFORMANCE_TIMEOUT:-120}
RETRIES=${VETTO_CONFORMANCE_REF_RETRIES:-2}
KNOWN=$here/known-host-failures.txt
RESULTS=""
GATE=vetto-shim
REFERENCE=crun
BUILD_ONLY=0
RUNTIMES=()
ONLY=()

die() { echo "runtime-tools.sh: $*" >&2; exit 2; }
skip() { echo "runtime-tools.sh: SKIP: $*" >&2; exit 77; }

while [ $# -gt 0 ]; do
  case $1 in
    --runtime) [[ ${2:-} == ?*=?* ]] || die "--runtime NAME=PATH"; RUNTIMES+=("$2"); shift 2 ;;
    --test) [ -n "${2:-}" ] || die "--test NAME"; ONLY+=("$2"); shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --results) RESULTS=${2:?}; shift 2 ;;
    --known) KNOWN=${2:?}; shift 2 ;;
    --reference) REFERENCE=${2:?}; shift 2 ;;
    --gate) GATE=${2:?}; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

# --- prerequisites ----------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || skip "run as root (the suite creates containers and cgroups)"
command -v go >/dev/null || skip "no Go toolchain: apt-get install golang-go"
command -v python3 >/dev/null || skip "python3 is needed for the report"
if ! git --git-dir="$GIT" rev-parse -q --verify HEAD >/dev/null 2>&1; then
  skip "no runtime-tools git mirror at $GIT.
  Get one: git clone --mirror https://github.com/opencontainers/runtime-tools <dir>
  and point VETTO_RUNTIME_TOOLS_GIT at <dir> (or copy one from a machine that has it)."
fi
COMMIT=$(git --git-dir="$GIT" rev-parse -q --verify "$REV^{commit}") ||
  skip "$GIT has no commit $REV (fetch it, or set VETTO_RUNTIME_TOOLS_REV)"

# --- build (once per commit) ------------------------------------------------------------------
SUITE=$CACHE/runtime-tools-$COMMIT
build_suite() {
  mkdir -p "$CACHE" || die "cannot create $CACHE"
  exec 9>"$CACHE/.lock"
  flock 9
  if [ -f "$SUITE/.complete" ]; then exec 9>&-; return 0; fi
  local tmp
  tmp=$(mktemp -d "$CACHE/.build-${COMMIT:0:12}.XXXXXX")
  echo "building runtime-tools ${COMMIT:0:12} ($(go version | cut -d' ' -f3)) into $SUITE"
  local t0=$SECONDS
  git --git-dir="$GIT" archive "$COMMIT" | tar -x -C "$tmp" || { rm -rf "$tmp"; die "git archive failed"; }
  if ! (
    cd "$tmp" &&
      export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local GO111MODULE=on \
        GOCACHE="$tmp/.gocache" GOPATH="$tmp/.gopath" &&
      go build -tags "netgo osusergo" -ldflags "-extldflags -static" -o runtimetest ./cmd/runtimetest &&
      mkdir -p .bin && go build -o .bin/ ./validation/... &&
      for b in .bin/*; do n=$(basename "$b"); mv "$b" "validation/$n/$n.t" || exit 1; done
  ) >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    rm -rf "$tmp" "$tmp.log"
    die "building runtime-tools failed (Go $(go version | cut -d' ' -f3) needs a commit whose go.mod says go <= that version)"
  fi
  chmod -R u+w "$tmp/.gopath" 2>/dev/null
  rm -rf "$tmp/.gocache" "$tmp/.gopath" "$tmp/.bin" "$tmp.log"
  printf 'commit %s\ngo %s\nbuilt %s in %ss\n' "$COMMIT" "$(go version)" "$(date -Is)" $((SECONDS - t0)) >"$tmp/.complete"
  rm -rf "$SUITE"
  mv "$tmp" "$SUITE"
  echo "built in $((SECONDS - t0))s"
  exec 9>&-
}
if [ -f "$SUITE/.complete" ]; then
  echo "runtime-tools ${COMMIT:0:12}: reusing $SUITE"
else
  build_suite
fi
TESTS=()
for f in "$SUITE"/validation/*/*.t; do TESTS+=("$(basename "$f" .t)"); done
[ ${#TESTS[@]} -gt 0 ] || die "no validation programs in $SUITE (remove it to rebuild)"
if [ ${#ONLY[@]} -gt 0 ]; then
  for t in "${ONLY[@]}"; do [ -x "$SUITE/validation/$t/$t.t" ] || die "no such test: $t"; done
  TESTS=("${ONLY[@]}")
fi
[ "$BUILD_ONLY" -eq 1 ] && { echo "$SUITE"; exit 0; }

# --- runtimes -----------------------------------------------------------------------------------
if [ ${#RUNTIMES[@]} -eq 0 ]; then
  RUNTIMES=("vetto-shim=$repo/target/debug/vetto-shim")
  [ -x /usr/bin/crun ] && RUNTIMES+=("crun=/usr/bin/crun")
  [ -x /usr/sbin/runc ] && RUNTIMES+=("runc=/usr/sbin/runc")
fi
NAMES=()
for spec in "${RUNTIMES[@]}"; do
  name=${spec%%=*} path=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || die "bad runtime name: $name"
  [ -x "$path" ] || die "$name: $path is not an executable"
  NAMES+=("$name")
done

[ -n "$RESULTS" ] || RESULTS=$repo/target/conformance/runtime-tools-$(date +%Y%m%dT%H%M%S)
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d /tmp/vetto-conformance.XXXXXX)
chmod 755 "$WORK"

# --- hybrid cgroups ---------------------------------------------------------------------------
# crun (1.8) refuses a hybrid host whose cgroup2 hierarchy has controllers ("cgroups in hybrid
# mode not supported, drop all controllers from cgroupv2"; here hugetlb, which no v1 hierarchy
# binds). Such runtimes run in a private mount namespace without /sys/fs/cgroup/unified, where
# the host looks like plain cgroup v1; nothing on the host changes.
HIDE_UNIFIED=""
if [ -r /sys/fs/cgroup/unified/cgroup.controllers ] && [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers)" ]; then
  HIDE_UNIFIED=" ${VETTO_CONFORMANCE_HIDE_UNIFIED-crun} "
  echo "note: hybrid cgroups with controllers in cgroup2 ($(cat /sys/fs/cgroup/unified/cgroup.controllers)):" \
    "$(echo $HIDE_UNIFIED) runs without /sys/fs/cgroup/unified (private mount namespace)"
fi

# --- per-test cleanup ---------------------------------------------------------------------------
# cleanup NAME RUNTIME_DIR OUT_PREFIX: force-deletes containers left in the private root, removes
# the bundle directory and cgroups the test left; records what it found in OUT_PREFIX.leftover.
cleanup() {
  local name=$1 rw=$2 out=$3 id ids=() found=() d
  for d in "$rw/root"/*; do
    [ -e "$d" ] || continue
    id=$(basename "$d")
    "$rw/runtime" delete --force "$id" >/dev/null 2>&1 ||
      "$rw/runtime" kill "$id" KILL >/dev/null 2>&1
    sleep 0.2
    "$rw/runtime" delete --force "$id" >/dev/null 2>&1
    if [ -e "$d" ]; then found+=("container $id (could not delete)"); else found+=("container $id"); fi
  done
  while read -r m; do
    umount -l "$m" 2>/dev/null && found+=("mount $m")
  done < <(awk -v p="$rw/tmp/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r)
  for d in "$rw/tmp"/*; do
    [ -e "$d" ] || continue
    rm -rf "$d" && found+=("bundle $(basename "$d")")
  done
  # the container ids this test created
  if [ -s "$rw/calls.log" ]; then
    mapfile -t ids < <(awk '$1 == "create" || $1 == "run" { print $NF }' "$rw/calls.log" | sort -u)
    cat "$rw/calls.log" >>"$rw/calls.all"; : >"$rw/calls.log"
  fi
  local pat='/(testdir|cgrouptest)(/|$)'
  for id in ${ids[@]+"${ids[@]}"}; do pat+="|$id"; done
  while read -r d; do
    if rmdir "$d" 2>/dev/null; then found+=("cgroup $d"); else found+=("cgroup $d (busy)"); fi
  done < <(find /sys/fs/cgroup -mindepth 2 -type d 2>/dev/null | grep -E "$pat" | sort -r)
  if [ ${#found[@]} -gt 0 ]; then printf '%s\n' "${found[@]}" >"$out.leftover"; fi
}

# run_one NAME RUNTIME_DIR OUT TEST
run_one() {
  local name=$1 rw=$2 out=$3 t=$4
  (cd "$SUITE" && TMPDIR=$rw/tmp RUNTIME=$rw/runtime \
    exec timeout -k 10 "$TIMEOUT" "./validation/$t/$t.t" </dev/null >"$out/$t.tap" 2>"$out/$t.stderr")
  echo $? >"$out/$t.rc"
  cleanup "$name" "$rw" "$out/$t"
}

finish() {
  local rc=$?
  for name in ${NAMES[@]+"${NAMES[@]}"}; do
    [ -d "$WORK/$name" ] && cleanup "$name" "$WORK/$name" "$WORK/$name/final" 2>/dev/null
  done
  rm -rf "$WORK"
  exit $rc
}
trap finish EXIT
trap 'exit 130' INT TERM

# --- run ----------------------------------------------------------------------------------------
echo "runtime-tools ${COMMIT:0:12}: ${#TESTS[@]} tests x ${#NAMES[@]} runtimes, timeout ${TIMEOUT}s; results in $RESULTS"
{
  echo "runtime-tools $COMMIT"
  sed -n 2p "$SUITE/.complete"
  echo "started $(date -Is)"
} >"$RESULTS/run-info.txt"
t_all=$SECONDS
ORDERED=()
for spec in "${RUNTIMES[@]}"; do [ "${spec%%=*}" = "$GATE" ] && ORDERED+=("$spec"); done
for spec in "${RUNTIMES[@]}"; do [ "${spec%%=*}" != "$GATE" ] && ORDERED+=("$spec"); done
for spec in "${ORDERED[@]}"; do
  name=${spec%%=*} path=${spec#*=}
  rw=$WORK/$name out=$RESULTS/$name
  mkdir -p "$rw/root" "$rw/tmp" "$rw/bin" "$out"
  cp "$path" "$rw/bin/$(basename "$path")"
  envline=""
  if [[ $(basename "$path") == vetto* ]]; then
    mkdir -p "$rw/audit"
    if [ -n "${VETTO_CONFORMANCE_SHIM_CONFIG:-}" ]; then
      envline="VETTO_SHIM_CONFIG=$VETTO_CONFORMANCE_SHIM_CONFIG "
    else
      printf '[audit]\nstore = "%s"\n' "$rw/audit/audit.db" >"$rw/shim.toml"
      envline="VETTO_SHIM_CONFIG=$rw/shim.toml "
    fi
  fi
  bin=$rw/bin/$(basename "$path")
  {
    echo '#!/bin/sh'
    echo "printf '%s\\n' \"\$*\" >>$rw/calls.log"
    if [[ $HIDE_UNIFIED == *" $name "* ]]; then
      echo "${envline}exec unshare -m --propagation private sh -c 'umount -l /sys/fs/cgroup/unified && exec \"\$0\" --root $rw/root \"\$@\"' $bin \"\$@\""
    else
      echo "${envline}exec $bin --root $rw/root \"\$@\""
    fi
  } >"$rw/runtime"
  chmod 755 "$rw/runtime"
  {
    echo "$name: $path (sha256 $(sha256sum "$rw/bin/$(basename "$path")" | cut -c1-16), $(date -r "$path" -Is))"
    "$path" --version 2>&1 | head -2 | sed 's/^/  /'
  } | tee -a "$RESULTS/run-info.txt"
  t_rt=$SECONDS
  for t in "${TESTS[@]}"; do
    run_one "$name" "$rw" "$out" "$t"
    # when the reference shares a failure of the gate runtime it is tried again (crun's hook
    # runs race with SIGPIPE, for one), so that a flaky reference does not excuse the gate;
    # the gate runtime runs first, earlier tries are kept as <test>.tryN.*
    if [ "$name" = "$REFERENCE" ] && [ "$RETRIES" -gt 0 ] && [ -e "$RESULTS/$GATE/$t.rc" ] &&
      python3 "$here/tap_report.py" --shares "$RESULTS" "$KNOWN" "$GATE" "$REFERENCE" "$t"; then
      for k in $(seq 1 "$RETRIES"); do
        for e in tap stderr rc leftover; do [ -e "$out/$t.$e" ] && mv "$out/$t.$e" "$out/$t.try$k.$e"; done
        run_one "$name" "$rw" "$out" "$t"
        if ! python3 "$here/tap_report.py" --shares "$RESULTS" "$KNOWN" "$GATE" "$REFERENCE" "$t"; then
          echo "shared $GATE's failure on try 1, not on try $((k + 1))" >"$out/$t.retries"
          break
        fi
        echo "shared $GATE's failure in $((k + 1)) tries" >"$out/$t.retries"
      done
    fi
  done
  [ -s "$rw/calls.all" ] && cp "$rw/calls.all" "$out/calls.log"
  echo "  $name: ${#TESTS[@]} tests in $((SECONDS - t_rt))s"
done

# a failure of the gate runtime that the reference does not share is tried again: the gate
# fails only on one that repeats (some tests race, e.g. poststart's hook against the process)
if [ -d "$RESULTS/$GATE" ] && [ -d "$RESULTS/$REFERENCE" ] && [ "$RETRIES" -gt 0 ]; then
  rw=$WORK/$GATE out=$RESULTS/$GATE
  for t in "${TESTS[@]}"; do
    python3 "$here/tap_report.py" --flagged "$RESULTS" "$KNOWN" "$GATE" "$REFERENCE" "$t" || continue
    for k in $(seq 1 "$RETRIES"); do
      for e in tap stderr rc leftover; do [ -e "$out/$t.$e" ] && mv "$out/$t.$e" "$out/$t.try$k.$e"; done
      run_one "$GATE" "$rw" "$out" "$t"
      if ! python3 "$here/tap_report.py" --flagged "$RESULTS" "$KNOWN" "$GATE" "$REFERENCE" "$t"; then
        echo "FLAKY: failed on try 1, passed on try $((k + 1))" >"$out/$t.retries"
        break
      fi
      echo "failed in $((k + 1)) tries" >"$out/$t.retries"
    done
    echo "  retried $GATE $t: $(cat "$out/$t.retries")"
  done
fi
echo "finished $(date -Is) in $((SECONDS - t_all))s" >>"$RESULTS/run-info.txt"

TIMEOUT=$TIMEOUT python3 "$here/tap_report.py" "$RESULTS" "$KNOWN" "$GATE" "$REFERENCE" "${NAMES[@]}" |
  tee "$RESULTS/report.txt"
rc=${PIPESTATUS[0]}
echo "runtime-tools: ${#NAMES[@]} runtimes in $((SECONDS - t_all))s; results in $RESULTS"
exit "$rc"
