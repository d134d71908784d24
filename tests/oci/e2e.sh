#!/usr/bin/env bash
# End-to-end tests of vetto-shim driven by the real clients from Debian's packages: Podman,
# containerd (ctr) and dockerd. Every daemon gets private roots, state directories and sockets
# under one temporary directory, and everything is stopped and removed at the end.
#
# usage: tests/oci/e2e.sh [path/to/vetto-shim]      (as root; `make e2e`, part of `make test`)
#
# The image is built here with no registry: busybox (package busybox-static) and a static
# probe (tests/oci/probe.c) in a rootfs tarball, `podman import`ed, `podman save`d as a
# docker-archive for containerd and dockerd.
#
# The runtime's audit store is a temporary one: shim.toml's [audit] store points into the
# work directory. The daemons started here inherit $VETTO_SHIM_CONFIG; Podman's conmon starts
# the runtime with an environment of its own, so Podman is given a wrapper that sets it.
#
# The last line has the shape of cargo's summary ("test result: ok. N passed; M failed") so
# `make test` counts these tests with the others.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
SHIM=$(realpath "${1:-$here/../../target/debug/vetto-shim}")
if [ "$(id -u)" -ne 0 ]; then
  echo "tests/oci/e2e.sh: run as root (it starts containerd and dockerd)" >&2
  exit 1
fi
for tool in podman containerd ctr dockerd docker busybox gcc; do
  command -v "$tool" >/dev/null || { echo "e2e: $tool is missing (make deps)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/vetto-e2e.XXXXXX)
chmod 755 "$WORK"
LOGS=$WORK/logs
mkdir -p "$LOGS"

# --- the audit store ------------------------------------------------------------------------
VETTO=$(dirname "$SHIM")/vetto
AUDIT_STORE=$WORK/audit/audit.db
printf '[audit]\nstore = "%s"\n' "$AUDIT_STORE" >"$WORK/shim.toml"
export VETTO_SHIM_CONFIG=$WORK/shim.toml
mkdir -p "$WORK/shimwrap"
printf '#!/bin/sh\nVETTO_SHIM_CONFIG=%s exec %s "$@"\n' "$WORK/shim.toml" "$SHIM" >"$WORK/shimwrap/vetto-shim"
chmod 755 "$WORK/shimwrap/vetto-shim"
# audit_check PYTHON [ARGS...]: the store's records (JSON, one per line) on stdin of a
# Python snippet that prints what it found.
audit_check() {
  local code=$1
  shift
  "$VETTO" audit query --store "$AUDIT_STORE" --json 2>&1 |
    python3 -c "import json, sys
ev = [json.loads(l) for l in sys.stdin if l.startswith('{')]
$code" "$@"
}
pass=0
fail=0
failed=()

ok() { pass=$((pass + 1)); echo "test oci::$1 ... ok"; }
bad() {
  fail=$((fail + 1)); failed+=("$1"); echo "test oci::$1 ... FAILED"
  shift
  [ $# -gt 0 ] && printf '    %s\n' "$@"
}
# expect NAME WANT OUTPUT: OUTPUT contains every line of WANT (fixed strings).
expect() {
  local name=$1 want=$2 out=$3 line
  while IFS= read -r line; do
    if ! grep -qF -- "$line" <<<"$out"; then
      bad "$name" "missing: $line" "output was:" "$out"
      return
    fi
  done <<<"$want"
  ok "$name"
}
# refute NAME UNWANTED OUTPUT
refute() {
  if grep -qF -- "$2" <<<"$3"; then bad "$1" "unexpected: $2" "output was:" "$3"; else ok "$1"; fi
}

pids_to_stop=()
cleanup() {
  set +e
  if [ -n "${PODMAN[*]:-}" ]; then "${PODMAN[@]}" rm -af -t 0 >/dev/null 2>&1; fi
  for p in "${pids_to_stop[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids_to_stop[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$p" 2>/dev/null
  done
  # Anything still mounted under the work directory (snapshots, netns, shm).
  grep -F " $WORK" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- image ---------------------------------------------------------------------------------
rootfs=$WORK/rootfs
mkdir -p "$rootfs"/{bin,etc,tmp,proc,sys,dev,root,run,workspace}
cp "$(command -v busybox)" "$rootfs/bin/busybox"
for a in $("$rootfs/bin/busybox" --list); do [ -e "$rootfs/bin/$a" ] || ln -s busybox "$rootfs/bin/$a"; done
gcc -static -O2 -o "$rootfs/bin/probe" "$here/probe.c" || { echo "e2e: cannot build the probe" >&2; exit 1; }
echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
echo 'root:x:0:' >"$rootfs/etc/group"
tar -C "$rootfs" -cf "$WORK/rootfs.tar" .

# A workspace a developer would bind-mount: a secret, code, a git hook directory.
ws=$WORK/workspace
mkdir -p "$ws/.git/hooks"
echo 'API_KEY=hunter2' >"$ws/.env"
echo 'print(1)' >"$ws/main.py"

# A stand-in for a container daemon's socket (a real listening unix socket).
python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])" "$WORK/docker.sock"

UL=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=32768:32768)
HARD_CHECK='echo "env=[$(cat /workspace/.env)]"; echo "token=[$GH_TOKEN]"
echo x >/etc/vetto-e2e 2>/dev/null && echo "etc=writable" || echo "etc=denied"
echo x >/workspace/out.txt && echo "workspace=writable"
echo x >/workspace/.git/hooks/pre-commit 2>/dev/null && echo "hooks=writable" || echo "hooks=denied"
probe ptrace; grep Seccomp_filters /proc/self/status'

# --- Podman --------------------------------------------------------------------------------
PODMAN=(podman --root "$WORK/podman/root" --runroot "$WORK/podman/run" --storage-driver vfs
  --runtime "$WORK/shimwrap/vetto-shim" --cgroup-manager cgroupfs --events-backend file --tmpdir "$WORK/podman/tmp")
if "${PODMAN[@]}" import "$WORK/rootfs.tar" localhost/vetto-e2e:latest >"$LOGS/podman-import" 2>&1 &&
  "${PODMAN[@]}" save --format docker-archive -o "$WORK/image.tar" localhost/vetto-e2e:latest >>"$LOGS/podman-import" 2>&1; then
  ok podman_import_and_save
else
  bad podman_import_and_save "$(cat "$LOGS/podman-import")"
fi
P=("${PODMAN[@]}" run --rm --network none "${UL[@]}")

out=$("${P[@]}" localhost/vetto-e2e sh -c 'echo hello; probe ptrace; grep Seccomp_filters /proc/self/status' 2>&1)
expect podman_plain_run_honours_the_bundle_seccomp_profile $'hello\nptrace: allowed\nSeccomp_filters:\t1' "$out"

# Without a policy, what the process gets is what runc gives it.
CAPS='grep -E "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Seccomp_filters):" /proc/self/status'
ours=$("${P[@]}" localhost/vetto-e2e sh -c "$CAPS" 2>&1)
theirs=$("${PODMAN[@]}" --runtime "$(command -v runc)" run --rm --network none "${UL[@]}" localhost/vetto-e2e sh -c "$CAPS" 2>&1)
[ -n "$ours" ] && [ "$ours" = "$theirs" ] && ok podman_plain_process_matches_runc \
  || bad podman_plain_process_matches_runc "vetto-shim:" "$ours" "runc:" "$theirs"

out=$("${P[@]}" --annotation dev.vetto.policy=default -e GH_TOKEN=ghp_secret -v "$ws:/workspace" \
  localhost/vetto-e2e sh -c "$HARD_CHECK" 2>&1)
expect podman_hardened_run $'env=[]\ntoken=[]\netc=denied\nworkspace=writable\nhooks=denied\nptrace: Operation not permitted\nSeccomp_filters:\t2' "$out"
[ "$(cat "$ws/.env")" = "API_KEY=hunter2" ] && [ -f "$ws/out.txt" ] && ok podman_hardened_host_side_intact \
  || bad podman_hardened_host_side_intact "the host's .env changed or out.txt is missing"
rm -f "$ws/out.txt"

# A terminal: the console socket through the hardened path.
out=$("${P[@]}" -t --annotation dev.vetto.policy=default localhost/vetto-e2e sh -c 'tty; echo tty-ok' 2>&1)
expect podman_tty $'/dev/pts/0\ntty-ok' "$out"

# The documented `--tmpfs /tmp` (Podman adds `tmpcopyup`, which vetto-shim drops: the tmpfs
# starts empty); the image root is read-only for metadata too.
out=$("${P[@]}" --annotation dev.vetto.policy=default --tmpfs /tmp localhost/vetto-e2e \
  sh -c 'echo x > /tmp/f && cat /tmp/f && echo tmpfs-ok; chmod 4755 /bin/busybox 2>/dev/null && echo IMAGE-CHMOD; echo end' 2>&1)
expect podman_documented_tmpfs_form $'x\ntmpfs-ok\nend' "$out"
refute podman_image_metadata_is_read_only IMAGE-CHMOD "$out"

if "${PODMAN[@]}" run -d --name e2e-d --network none "${UL[@]}" --annotation dev.vetto.policy=default \
  -v "$ws:/workspace" localhost/vetto-e2e sleep 321 >"$LOGS/podman-d" 2>&1; then
  ok podman_run_detached
  out=$("${PODMAN[@]}" exec -e GH_TOKEN=x e2e-d sh -c "$HARD_CHECK" 2>&1)
  expect podman_exec_is_hardened_too $'env=[]\ntoken=[]\netc=denied\nptrace: Operation not permitted\nSeccomp_filters:\t2' "$out"
  out=$("${PODMAN[@]}" exec --privileged e2e-d true 2>&1)
  expect podman_privileged_exec_is_refused 'refused by vetto policy "default": a privileged process (capabilities' "$out"
  out=$(audit_check '
for e in ev:
    if e["kind"] == "refusal" and e["subject"] == "exec" and e["engine"]["container"] == sys.argv[1]:
        print("exec refused:", e["reasons"][0].split(" (")[0], "in", "the container session" if any(
            x["kind"] == "session_start" and x["session"] == e["session"] for x in ev) else "?")' \
    "$("${PODMAN[@]}" inspect -f '{{.Id}}' e2e-d 2>/dev/null)")
  expect podman_privileged_exec_refusal_is_audited "exec refused: a privileged process in the container session" "$out"
  "${PODMAN[@]}" pause e2e-d >/dev/null 2>&1
  st=$("${PODMAN[@]}" inspect -f '{{.State.Status}}' e2e-d 2>&1)
  [ "$st" = paused ] && ok podman_pause || bad podman_pause "status: $st"
  "${PODMAN[@]}" unpause e2e-d >/dev/null 2>&1
  st=$("${PODMAN[@]}" inspect -f '{{.State.Status}}' e2e-d 2>&1)
  [ "$st" = running ] && ok podman_unpause || bad podman_unpause "status: $st"
  "${PODMAN[@]}" rm -f -t 0 e2e-d >/dev/null 2>&1
  # The container's own command line, exactly (a host process that happens to run a
  # `sleep 300` of its own is not the container's).
  if "${PODMAN[@]}" container exists e2e-d || pgrep -xf 'sleep 321' >/dev/null; then
    bad podman_rm_force "container or its process still there"
  else
    ok podman_rm_force
  fi
else
  bad podman_run_detached "$(cat "$LOGS/podman-d")"
fi

out=$("${P[@]}" --annotation dev.vetto.policy=default --privileged localhost/vetto-e2e true 2>&1)
expect podman_privileged_is_refused 'refused by vetto policy "default": a privileged container' "$out"
# The refusal is in the runtime's audit store, with the reasons as shown, Podman named.
out=$(audit_check '
for e in ev:
    if e["kind"] == "refusal" and e["subject"] == "bundle":
        for r in e["reasons"]:
            if "privileged" in r:
                print("refused:", r.split(" (")[0], "by", e["engine"].get("driver"))')
expect podman_refusal_is_audited "refused: a privileged container by podman" "$out"
out=$("${PODMAN[@]}" run --rm --network host "${UL[@]}" --annotation dev.vetto.policy=default localhost/vetto-e2e true 2>&1)
expect podman_host_network_is_refused "the host's network namespace" "$out"
out=$("${P[@]}" --annotation dev.vetto.policy=default -v "$WORK/docker.sock:/var/run/docker.sock" localhost/vetto-e2e true 2>&1)
expect podman_daemon_socket_bind_is_refused "a bind of the container daemon socket $WORK/docker.sock" "$out"
# A network namespace with an interface besides lo (a veth pair, not connected anywhere):
# no vetto network mode allows it.
NETNS=vetto-e2e-$$
if ip netns add "$NETNS" && ip -n "$NETNS" link add v0 type veth peer name v1; then
  out=$("${PODMAN[@]}" run --rm --network "ns:/run/netns/$NETNS" "${UL[@]}" --annotation dev.vetto.policy=default localhost/vetto-e2e true 2>&1)
  expect podman_network_interfaces_are_refused 'but the container has network interface "v' "$out"
  out=$("${PODMAN[@]}" run --rm --network "ns:/run/netns/$NETNS" "${UL[@]}" localhost/vetto-e2e sh -c 'ip -o link | wc -l' 2>&1)
  expect podman_plain_keeps_its_network "3" "$out"
else
  bad podman_network_interfaces_are_refused "cannot create a test network namespace"
fi
ip netns del "$NETNS" 2>/dev/null
# A hardened container is one session: start at create, end at delete, the store verifies.
rm -f "$WORK/audit.cid"
"${P[@]}" --cidfile "$WORK/audit.cid" --annotation dev.vetto.policy=default localhost/vetto-e2e true >"$LOGS/audit-run" 2>&1
out=$(audit_check '
cid = sys.argv[1]
s = [e["session"] for e in ev if e["kind"] == "session_start" and e["engine"]["container"] == cid]
for x in s:
    print("kinds:", " ".join(e["kind"] for e in ev if e["session"] == x))
    print("start:", [e for e in ev if e["session"] == x][0]["tier"], [e for e in ev if e["session"] == x][0]["engine"]["driver"])
    print("end:", [e for e in ev if e["session"] == x][-1].get("reason"))' "$(cat "$WORK/audit.cid" 2>/dev/null)")
expect podman_hardened_run_is_one_audited_session $'kinds: session_start session_end\nstart: shim podman\nend: deleted' "$out"
out=$("$VETTO" audit verify --store "$AUDIT_STORE" 2>&1) && ok podman_audit_store_verifies \
  || bad podman_audit_store_verifies "$out"

out=$("${P[@]}" --annotation dev.vetto.policy=../etc/x localhost/vetto-e2e true 2>&1)
expect podman_bad_policy_annotation_is_named 'dev.vetto.policy="../etc/x": not a profile' "$out"
left=$(ls -A /run/vetto-shim/.vetto 2>/dev/null; ls -A "$WORK/podman/run" 2>/dev/null | grep -c vetto)
refute podman_refusals_leave_no_state "e2e" "$left"

# Network through the broker: a policy (host-owned file) allowing one loopback test server;
# everything else is refused by the broker, and there is no route around it.
NPORT=$((20000 + RANDOM % 20000))
mkdir -p "$WORK/www" && echo "hello-through-the-broker" >"$WORK/www/index.html"
python3 -m http.server "$NPORT" --bind 127.0.0.2 --directory "$WORK/www" >"$LOGS/www" 2>&1 &
pids_to_stop+=($!)
printf '[network]\nmode = "allowlist"\nallow_cidrs = ["127.0.0.2/32:%s"]\n' "$NPORT" >"$WORK/net.toml"
chmod 644 "$WORK/net.toml"
for _ in $(seq 1 50); do grep -q Serving "$LOGS/www" && break; sleep 0.1; done
NET_CHECK="echo proxy=\$http_proxy; wget -q -O- http://127.0.0.2:$NPORT/index.html
wget -q -O- http://127.0.0.3:$NPORT/ >/dev/null 2>&1 || echo other=refused
nc -w 2 127.0.0.2 $NPORT </dev/null >/dev/null 2>&1 || echo direct=refused"
# A policy file named by an annotation must be in the host's policy directory (passed as a
# runtime flag, as a host would in containers.conf).
out=$("${P[@]}" --annotation "dev.vetto.policy=$WORK/net.toml" localhost/vetto-e2e true 2>&1)
expect podman_annotation_policy_outside_the_policy_dir_is_refused "must be in the host's policy directory" "$out"
out=$("${PODMAN[@]}" --runtime-flag "vetto-policy-dir=$WORK" run --rm --network none "${UL[@]}" \
  --annotation "dev.vetto.policy=$WORK/net.toml" localhost/vetto-e2e sh -c "$NET_CHECK" 2>&1)
expect podman_network_through_the_broker $'proxy=http://127.0.0.1:3128\nhello-through-the-broker\nother=refused\ndirect=refused' "$out"
for _ in $(seq 1 50); do pgrep -f "vetto-shim __broker" >/dev/null || break; sleep 0.1; done
refute podman_broker_ends_with_the_container "__broker" "$(pgrep -af 'vetto-shim __broker')"
# The broker recorded both connections (allowed, refused) in the container's session.
out=$(audit_check '
starts = {e["session"] for e in ev if e["kind"] == "session_start"}
for e in ev:
    if e["kind"] == "connection" and e["session"] in starts and str(sys.argv[1]) in (e.get("destination") or ""):
        print("connection:", e["decision"], e["destination"].split(":")[0])' "$NPORT")
expect podman_broker_connections_are_audited $'connection: allow 127.0.0.2\nconnection: deny 127.0.0.3' "$out"
# An exec gets the policy's variables too (the engine builds its process from its own spec).
if "${PODMAN[@]}" --runtime-flag "vetto-policy-dir=$WORK" run -d --name e2e-net --network none "${UL[@]}" \
  --annotation "dev.vetto.policy=$WORK/net.toml" localhost/vetto-e2e sleep 300 >"$LOGS/net-d" 2>&1; then
  out=$("${PODMAN[@]}" --runtime-flag "vetto-policy-dir=$WORK" exec e2e-net sh -c "$NET_CHECK" 2>&1)
  expect podman_exec_uses_the_broker $'proxy=http://127.0.0.1:3128\nhello-through-the-broker' "$out"
  "${PODMAN[@]}" rm -f -t 0 e2e-net >/dev/null 2>&1
else
  bad podman_exec_uses_the_broker "$(cat "$LOGS/net-d")"
fi

# --- rootless Podman ----------------------------------------------------------------------
# An unprivileged user with subordinate ids (rootless Podman maps them); the runtime and the
# probe are staged where that user can read them. On this cgroup-v1 host the runtime creates
# no cgroups when rootless (as Podman itself does not).
RL_USER=vetto-e2e
id -u "$RL_USER" >/dev/null 2>&1 || useradd -m -s /bin/sh "$RL_USER"
grep -q "^$RL_USER:" /etc/subuid || usermod --add-subuids 300000-365535 --add-subgids 300000-365535 "$RL_USER"
RL=$WORK/rootless
mkdir -p "$RL/bin" "$RL/run" "$RL/ws/.git/hooks"
cp "$SHIM" "$RL/bin/vetto-shim"
cp "$VETTO" "$RL/bin/vetto"
# A rootless runtime keeps its audit store in the user's state directory: start afresh.
RL_STATE=$(getent passwd "$RL_USER" | cut -d: -f6)/.local/state/vetto
rm -rf "$RL_STATE"
cp "$WORK/rootfs.tar" "$RL/rootfs.tar"
echo 'API_KEY=hunter2' >"$RL/ws/.env"
chown -R "$RL_USER" "$RL"
chmod 700 "$RL/run"
chmod 755 "$RL" "$RL/bin"
as_rl() { # command...: as the rootless user, with its own storage and runtime dir
  setpriv --reuid="$RL_USER" --regid="$(id -g "$RL_USER")" --init-groups \
    env -i HOME="$(getent passwd "$RL_USER" | cut -d: -f6)" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    XDG_RUNTIME_DIR="$RL/run" "$@"
}
RLP=(podman --root "$RL/storage" --runroot "$RL/run/storage" --storage-driver vfs
  --runtime "$RL/bin/vetto-shim" --cgroup-manager cgroupfs --events-backend file)
if as_rl "${RLP[@]}" import "$RL/rootfs.tar" localhost/vetto-e2e:latest >"$LOGS/rl-import" 2>&1; then
  ok rootless_podman_import
  out=$(as_rl "${RLP[@]}" run --rm --network none localhost/vetto-e2e sh -c 'echo hello; grep Seccomp_filters /proc/self/status' 2>&1)
  expect rootless_podman_plain_run $'hello\nSeccomp_filters:\t1' "$out"
  out=$(as_rl "${RLP[@]}" run --rm --network none --annotation dev.vetto.policy=default -e GH_TOKEN=x \
    -v "$RL/ws:/workspace" localhost/vetto-e2e sh -c "$HARD_CHECK" 2>&1)
  expect rootless_podman_hardened_run $'env=[]\ntoken=[]\netc=denied\nworkspace=writable\nhooks=denied\nptrace: Operation not permitted\nSeccomp_filters:\t2' "$out"
  # Recorded in the user's store, with the user's uid on the host.
  out=$(as_rl "$RL/bin/vetto" audit query --store "$RL_STATE/audit/audit.db" --json 2>&1 |
    python3 -c 'import json, sys
ev = [json.loads(l) for l in sys.stdin if l.startswith("{")]
for e in ev:
    if e["kind"] == "session_start":
        print("uid", e["uid"], "kinds:", " ".join(x["kind"] for x in ev if x["session"] == e["session"]))')
  expect rootless_podman_hardened_run_is_audited "uid $(id -u "$RL_USER") kinds: session_start session_end" "$out"
  if as_rl "${RLP[@]}" run -d --name rl-d --network none --annotation dev.vetto.policy=default \
    localhost/vetto-e2e sleep 300 >"$LOGS/rl-d" 2>&1; then
    out=$(as_rl "${RLP[@]}" exec rl-d sh -c 'probe ptrace; echo x >/etc/x 2>/dev/null || echo etc=denied' 2>&1)
    expect rootless_podman_exec_is_hardened $'ptrace: Operation not permitted\netc=denied' "$out"
    as_rl "${RLP[@]}" rm -f -t 0 rl-d >/dev/null 2>&1
    if as_rl "${RLP[@]}" container exists rl-d; then bad rootless_podman_rm_force; else ok rootless_podman_rm_force; fi
  else
    bad rootless_podman_run_detached "$(cat "$LOGS/rl-d")"
  fi
  as_rl "${RLP[@]}" rm -af -t 0 >/dev/null 2>&1
else
  bad rootless_podman_import "$(cat "$LOGS/rl-import")"
fi
pkill -KILL -u "$RL_USER" 2>/dev/null   # rootless Podman's pause process
rm -rf "$RL" "$RL_STATE" 2>/dev/null || true

# --- containerd ----------------------------------------------------------------------------
# shellcheck source=tests/oci/containerd.sh
. "$here/containerd.sh"
start_containerd "$WORK/containerd" "$LOGS/containerd"
pids_to_stop+=("$CTD_PID")
CTR=(ctr -a "$CTD_SOCK")
if "${CTR[@]}" images import --snapshotter native "$WORK/image.tar" >"$LOGS/ctr-import" 2>&1; then
  ok containerd_import
else
  bad containerd_import "$(cat "$LOGS/containerd" "$LOGS/ctr-import")"
fi
R=("${CTR[@]}" run --snapshotter native --runc-binary "$SHIM")
img=localhost/vetto-e2e:latest

out=$("${R[@]}" --rm --seccomp "$img" c-plain sh -c 'echo hello; grep Seccomp_filters /proc/self/status' 2>&1)
expect containerd_plain_run $'hello\nSeccomp_filters:\t1' "$out"

out=$("${R[@]}" --rm --seccomp --label dev.vetto.policy=default --env GH_TOKEN=ghp_x \
  --mount "type=bind,src=$ws,dst=/workspace,options=rbind:rw" "$img" c-hard sh -c "$HARD_CHECK" 2>&1)
expect containerd_hardened_run $'env=[]\ntoken=[]\netc=denied\nworkspace=writable\nhooks=denied\nptrace: Operation not permitted\nSeccomp_filters:\t2' "$out"
rm -f "$ws/out.txt"

if "${R[@]}" -d --seccomp --label dev.vetto.policy=default "$img" c-d sleep 300 >"$LOGS/ctr-d" 2>&1; then
  ok containerd_run_detached
  out=$("${CTR[@]}" task exec --exec-id e1 c-d sh -c 'probe ptrace; echo exec-ran' 2>&1)
  expect containerd_exec $'ptrace: Operation not permitted\nexec-ran' "$out"
  pid=$("${CTR[@]}" task ls 2>/dev/null | awk '$1 == "c-d" {print $2}')
  out=$("${CTR[@]}" task ps c-d 2>&1)
  expect containerd_ps "$pid" "$out"
  "${CTR[@]}" task kill -s SIGKILL c-d >/dev/null 2>&1
  for _ in $(seq 1 50); do
    "${CTR[@]}" task ls 2>/dev/null | grep -q 'c-d .*STOPPED' && break; sleep 0.1
  done
  expect containerd_kill "STOPPED" "$("${CTR[@]}" task ls 2>&1)"
  "${CTR[@]}" task delete c-d >/dev/null 2>&1 && "${CTR[@]}" container delete c-d >/dev/null 2>&1
  if "${CTR[@]}" container ls -q | grep -qx c-d || kill -0 "$pid" 2>/dev/null; then
    bad containerd_delete "c-d or pid $pid still there"
  else
    ok containerd_delete
  fi
else
  bad containerd_run_detached "$(cat "$LOGS/ctr-d")"
fi

# The refusal reaches the user through containerd's reading of the runtime's JSON log.
out=$("${R[@]}" --rm --privileged --label dev.vetto.policy=default "$img" c-priv true 2>&1)
expect containerd_shows_the_runtime_error 'refused by vetto policy "default": a privileged container' "$out"
out=$(audit_check '
for e in ev:
    if e["kind"] == "refusal" and e["engine"]["container"] == "c-priv":
        print("refused by", e["engine"].get("driver"))')
expect containerd_refusal_is_audited "refused by containerd" "$out"
"${CTR[@]}" container delete c-priv >/dev/null 2>&1

# --- dockerd -------------------------------------------------------------------------------
DK=$WORK/docker
mkdir -p "$DK"
cat >"$DK/daemon.json" <<EOF
{
  "data-root": "$DK/data",
  "exec-root": "$DK/exec",
  "pidfile": "$DK/docker.pid",
  "hosts": ["unix://$DK/docker.sock"],
  "storage-driver": "vfs",
  "iptables": false,
  "ip6tables": false,
  "ip-forward": false,
  "ip-masq": false,
  "bridge": "none",
  "runtimes": {
    "vetto": {"path": "$SHIM", "runtimeArgs": ["--vetto-policy=default"]},
    "vetto-plain": {"path": "$SHIM"},
    "vetto-net": {"path": "$SHIM", "runtimeArgs": ["--vetto-policy=$WORK/net.toml"]}
  }
}
EOF
dockerd --config-file "$DK/daemon.json" >"$LOGS/dockerd" 2>&1 &
pids_to_stop+=($!)
DOCKER=(docker -H "unix://$DK/docker.sock")
for _ in $(seq 1 100); do "${DOCKER[@]}" version >/dev/null 2>&1 && break; sleep 0.2; done
if "${DOCKER[@]}" load -i "$WORK/image.tar" >"$LOGS/docker-load" 2>&1; then
  ok docker_load
else
  bad docker_load "$(tail -5 "$LOGS/dockerd")" "$(cat "$LOGS/docker-load")"
fi

out=$("${DOCKER[@]}" run --rm --runtime vetto-plain --network none "$img" sh -c 'echo hello; probe ptrace; grep Seccomp_filters /proc/self/status' 2>&1)
expect docker_plain_run_honours_the_default_profile $'hello\nptrace: allowed\nSeccomp_filters:\t1' "$out"

ours=$("${DOCKER[@]}" run --rm --runtime vetto-plain --network none "$img" sh -c "$CAPS" 2>&1)
theirs=$("${DOCKER[@]}" run --rm --runtime runc --network none "$img" sh -c "$CAPS" 2>&1)
[ -n "$ours" ] && [ "$ours" = "$theirs" ] && ok docker_plain_process_matches_runc \
  || bad docker_plain_process_matches_runc "vetto-shim:" "$ours" "runc:" "$theirs"

out=$("${DOCKER[@]}" run --rm --runtime vetto --network none -e GH_TOKEN=ghp_x -v "$ws:/workspace" "$img" sh -c "$HARD_CHECK" 2>&1)
expect docker_hardened_run $'env=[]\ntoken=[]\netc=denied\nworkspace=writable\nhooks=denied\nptrace: Operation not permitted\nSeccomp_filters:\t2' "$out"
rm -f "$ws/out.txt"
# dockerd (through containerd's `moby` namespace) is named as the driver; start and end.
out=$(audit_check '
for e in ev:
    if e["kind"] == "session_start" and e["engine"].get("driver") == "docker":
        print("docker:", " ".join(x["kind"] for x in ev if x["session"] == e["session"]))')
expect docker_hardened_run_is_audited "docker: session_start session_end" "$out"

if "${DOCKER[@]}" run -d --name d-d --runtime vetto --network none "$img" sleep 300 >"$LOGS/docker-d" 2>&1; then
  ok docker_run_detached
  out=$("${DOCKER[@]}" exec d-d sh -c 'probe ptrace; echo exec-ran' 2>&1)
  expect docker_exec $'ptrace: Operation not permitted\nexec-ran' "$out"
  "${DOCKER[@]}" rm -f d-d >/dev/null 2>&1
  "${DOCKER[@]}" ps -aq --filter name=d-d | grep -q . && bad docker_rm_force "d-d still listed" || ok docker_rm_force
else
  bad docker_run_detached "$(cat "$LOGS/docker-d")"
fi

out=$("${DOCKER[@]}" run --rm --runtime vetto-net --network none "$img" sh -c "$NET_CHECK" 2>&1)
expect docker_network_through_the_broker $'proxy=http://127.0.0.1:3128\nhello-through-the-broker\nother=refused\ndirect=refused' "$out"

out=$("${DOCKER[@]}" run --rm --runtime vetto --privileged "$img" true 2>&1)
expect docker_shows_the_runtime_error 'refused by vetto policy "default": a privileged container' "$out"
out=$("${DOCKER[@]}" run --rm --runtime vetto --network none -v "$WORK/docker.sock:/var/run/docker.sock" "$img" true 2>&1)
expect docker_daemon_socket_bind_is_refused "a bind of the container daemon socket" "$out"

# The dev container in devcontainer/, brought up by the Dev Containers CLI on this dockerd
# (with the local image, a tmpfs home and root as the remote user: no registry here).
if command -v devcontainer >/dev/null; then
  dcws=$WORK/dcws
  mkdir -p "$dcws/.devcontainer" "$dcws/.git/hooks"
  echo 'API_KEY=hunter2' >"$dcws/.env"
  sed -e "s#\"mcr.microsoft.com/devcontainers/base:debian\"#\"$img\"#" \
    -e 's#"type=volume,source=vetto-devcontainer-home,target=/home/vscode"#"type=tmpfs,target=/root"#' \
    -e 's#"remoteUser": "vscode"#"remoteUser": "root"#' \
    "$here/../../devcontainer/devcontainer.json" >"$dcws/.devcontainer/devcontainer.json"
  out=$(DOCKER_HOST="unix://$DK/docker.sock" devcontainer up --workspace-folder "$dcws" 2>&1)
  expect devcontainer_up '"outcome":"success"' "$out"
  out=$(DOCKER_HOST="unix://$DK/docker.sock" devcontainer exec --workspace-folder "$dcws" sh -c "$HARD_CHECK" 2>&1)
  expect devcontainer_exec_is_hardened $'env=[]\netc=denied\nworkspace=writable\nhooks=denied\nptrace: Operation not permitted\nSeccomp_filters:\t2' "$out"
  "${DOCKER[@]}" ps -aq --filter "label=devcontainer.local_folder=$dcws" | xargs -r "${DOCKER[@]}" rm -f >/dev/null 2>&1
else
  bad devcontainer_up "the Dev Containers CLI (devcontainer) is missing: make deps"
fi

# --- summary -------------------------------------------------------------------------------
if [ "$fail" -eq 0 ]; then
  echo "test result: ok. $pass passed; 0 failed; 0 ignored; 0 measured; 0 filtered out (vetto-shim e2e)"
  exit 0
fi
echo "failed: ${failed[*]}"
echo "test result: FAILED. $pass passed; $fail failed; 0 ignored; 0 measured; 0 filtered out (vetto-shim e2e)"
exit 1
