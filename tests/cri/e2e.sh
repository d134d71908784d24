#!/usr/bin/env bash
# vetto-shim through containerd's CRI plugin, driven by crictl as the kubelet would drive it
# (issue 14): a private containerd (own root, state and socket) with a `vetto` runtime handler
# (runc v2 shim, BinaryName = vetto-shim) and a loopback-only CNI configuration
# (scripts/cni/vetto-loopback): the pod network of a hardened vetto pod is `lo` alone, which
# is what vetto-shim requires. runp, create, start, exec, logs, stop, rmp, once
# plain and once hardened (pod annotation dev.vetto.policy=default). No registry: the pause
# and busybox images are made locally. Nothing is left behind. Prints PASS/FAIL and a
# `test result:` line.
#
# usage: tests/cri/e2e.sh PATH/TO/vetto-shim
set -uo pipefail
SHIM=$(realpath "${1:?usage: e2e.sh PATH/TO/vetto-shim}")
HERE=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "cri e2e: needs root"; exit 1; }
[ -x /usr/lib/cni/loopback ] || { echo "cri e2e: /usr/lib/cni/loopback is missing (containernetworking-plugins)"; exit 1; }
for c in containerd podman gcc; do
  command -v $c >/dev/null || { echo "cri e2e: $c is missing (make deps)"; exit 1; }
done
CRICTL=$(bash "$HERE/build-crictl.sh" | tail -1)
rc=$?
if [ $rc -eq 77 ] || [ ! -x "$CRICTL" ]; then
  echo "cri e2e: SKIPPED (no cri-tools source to build crictl from)"
  exit 0
fi

W=$(mktemp -d /tmp/vetto-cri.XXXXXX)
chmod 755 "$W"
SOCK=$W/containerd.sock
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $*"; }
ko() { fail=$((fail + 1)); echo "FAIL $*"; }
CTRD_PID=
cleanup() {
  if [ -n "$CTRD_PID" ]; then
    for p in $("$CRICTL" -r "unix://$SOCK" pods -q 2>/dev/null); do
      "$CRICTL" -r "unix://$SOCK" stopp "$p" >/dev/null 2>&1
      "$CRICTL" -r "unix://$SOCK" rmp -f "$p" >/dev/null 2>&1
    done
    kill "$CTRD_PID" 2>/dev/null
    wait "$CTRD_PID" 2>/dev/null
    # The runc v2 shims of this containerd exit with their containers; stragglers go.
    pkill -9 -f "containerd-shim-runc-v2 .*-address $SOCK" 2>/dev/null
  fi
  grep " $W/" /proc/self/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m"; done
  podman --root "$W/podman" --runroot "$W/podman-run" rmi -af >/dev/null 2>&1
  rm -rf "$W"
  # Whatever a failed stop left in the pods' cgroups (all of them under this test's parent).
  local i d
  for i in $(seq 20); do
    for d in /sys/fs/cgroup/*/k8s.io-vetto-e2e; do
      [ -d "$d" ] || continue
      find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    ls -d /sys/fs/cgroup/*/k8s.io-vetto-e2e >/dev/null 2>&1 || break
    sleep 0.1
  done
}
trap cleanup EXIT

# --- images: a static pause and busybox, made here ----------------------------------------------
mkdir -p "$W/pause/rootfs" "$W/bb/rootfs/bin"
cat >"$W/pause.c" <<'EOF'
#include <signal.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
int main(void) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  for (;;) pause();
}
EOF
gcc -static -O2 -o "$W/pause/rootfs/pause" "$W/pause.c" || { echo "cri e2e: cannot build pause"; exit 1; }
cp /bin/busybox "$W/bb/rootfs/bin/busybox"
for a in sh echo cat sleep touch ls id; do ln -s busybox "$W/bb/rootfs/bin/$a"; done
P="podman --root $W/podman --runroot $W/podman-run --storage-driver vfs"
tar -C "$W/pause/rootfs" -cf "$W/pause.tar" .
tar -C "$W/bb/rootfs" -cf "$W/bb.tar" .
$P import -q --change 'ENTRYPOINT ["/pause"]' "$W/pause.tar" localhost/vetto-pause:1 >/dev/null &&
  $P import -q --change 'ENV PATH=/bin' "$W/bb.tar" localhost/vetto-busybox:1 >/dev/null &&
  $P save -q -o "$W/pause-img.tar" localhost/vetto-pause:1 &&
  $P save -q -o "$W/bb-img.tar" localhost/vetto-busybox:1 || { echo "cri e2e: cannot make images"; exit 1; }

# --- a private containerd with the CRI plugin and the vetto handler ------------------------------
mkdir -p "$W/cni" "$W/cni-bin" "$W/logs"
install -m 755 "$HERE/../../scripts/cni/vetto-loopback" "$W/cni-bin/vetto-loopback"
# containerd's CRI plugin also runs the standard `loopback` plugin in every pod.
install -m 755 /usr/lib/cni/loopback "$W/cni-bin/loopback"
cat >"$W/cni/10-vetto-loopback.conflist" <<'EOF'
{"cniVersion": "0.4.0", "name": "vetto-loopback", "plugins": [{"type": "vetto-loopback"}]}
EOF
cat >"$W/config.toml" <<EOF
version = 2
root = "$W/root"
state = "$W/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/vetto-pause:1"
  enable_selinux = false
  # This machine's capability bounding set has no CAP_SYS_RESOURCE, so nothing may lower an
  # OOM score below containerd's own (the pause container asks for -998): clamp, as
  # containerd does for unprivileged nodes.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$W/cni-bin"
    conf_dir = "$W/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vetto]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["dev.vetto.policy"]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.vetto.options]
        BinaryName = "$SHIM"
        Root = "$W/runtime-root"
        SystemdCgroup = false
EOF
containerd --config "$W/config.toml" >"$W/containerd.log" 2>&1 &
CTRD_PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
CR="$CRICTL -r unix://$SOCK -i unix://$SOCK -t 60s"
for _ in $(seq 100); do $CR info >/dev/null 2>&1 && break; sleep 0.2; done
ctr -a "$SOCK" -n k8s.io images import "$W/pause-img.tar" >/dev/null &&
  ctr -a "$SOCK" -n k8s.io images import "$W/bb-img.tar" >/dev/null ||
  { echo "cri e2e: image import failed"; tail -20 "$W/containerd.log"; exit 1; }
net=$($CR info -o json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin)["status"]["conditions"]
print(",".join("%s=%s" % (x["type"], x["status"]) for x in c))')
echo "cri: $($CR version | tr '\n' ' ')"
echo "cri: conditions $net"
case $net in *NetworkReady=True*) ok "cri.network_ready (loopback-only CNI)" ;; *) ko "cri.network_ready: $net" ;; esac

# expect NAME PATTERN CMD...: CMD succeeds and its output matches PATTERN.
expect() {
  local name=$1 pat=$2
  shift 2
  local out
  out=$("$@" 2>&1 </dev/null)
  local rc=$?
  if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q -- "$pat"; then ok "$name"
  else ko "$name: rc=$rc, /$pat/: $(printf '%s' "$out" | tr '\n' '|' | cut -c1-400)"; fi
}

# run_pod KIND ANNOTATIONS: the whole pod lifecycle under the vetto handler.
run_pod() {
  local kind=$1 ann=$2
  cat >"$W/pod-$kind.json" <<EOF
{"metadata": {"name": "vp-$kind", "namespace": "default", "uid": "vetto-$kind", "attempt": 1},
 "log_directory": "$W/logs/$kind", "annotations": $ann,
 "linux": {"cgroup_parent": "/k8s.io-vetto-e2e"}}
EOF
  cat >"$W/ctr-$kind.json" <<EOF
{"metadata": {"name": "c-$kind"}, "image": {"image": "localhost/vetto-busybox:1"},
 "command": ["sh", "-c", "echo hello-from-$kind; sleep 300"], "log_path": "c.log",
 "annotations": $ann, "linux": {}}
EOF
  local pod cid
  pod=$($CR runp --runtime vetto "$W/pod-$kind.json" 2>&1 </dev/null)
  if [ ${#pod} -ne 64 ]; then ko "$kind.runp: $pod"; tail -5 "$W/containerd.log"; return; fi
  ok "$kind.runp"
  cid=$($CR create "$pod" "$W/ctr-$kind.json" "$W/pod-$kind.json" 2>&1 </dev/null)
  if [ ${#cid} -ne 64 ]; then ko "$kind.create: $cid"; return; fi
  ok "$kind.create"
  expect "$kind.start" "$cid" $CR start "$cid"
  # vetto-shim made both: its shadow bundles exist only under its state root.
  expect "$kind.vetto_shim_runs_the_pod" "/.vetto/$pod\$" find "$W/runtime-root" -maxdepth 3 -path "*/.vetto/$pod"
  expect "$kind.vetto_shim_runs_the_container" "/.vetto/$cid\$" find "$W/runtime-root" -maxdepth 3 -path "*/.vetto/$cid"
  local i
  for i in $(seq 50); do $CR logs "$cid" 2>/dev/null | grep -q "hello-from-$kind" && break; sleep 0.1; done
  expect "$kind.logs" "hello-from-$kind" $CR logs "$cid"
  expect "$kind.exec" "in-exec" $CR exec "$cid" echo in-exec
  # The pod's network: lo only (the loopback CNI), which a hardened container requires.
  expect "$kind.only_lo" "^lo$" $CR exec "$cid" sh -c "ls /sys/class/net"
  if [ "$kind" = hardened ]; then
    expect "$kind.policy_in_state" '"dev.vetto.policy": "default"' "$SHIM" --root "$W/runtime-root/k8s.io" state "$cid"
    expect "$kind.rootfs_read_only" "^refused$" $CR exec "$cid" sh -c 'touch /probe 2>/dev/null && echo wrote || echo refused'
  else
    expect "$kind.rootfs_writable" "^wrote$" $CR exec "$cid" sh -c 'touch /probe 2>/dev/null && echo wrote || echo refused'
  fi
  expect "$kind.stop" "$cid" $CR stop -t 2 "$cid"
  expect "$kind.rm" "$cid" $CR rm "$cid"
  expect "$kind.stopp" "Stopped sandbox" $CR stopp "$pod"
  expect "$kind.rmp" "Removed sandbox" $CR rmp "$pod"
  expect "$kind.nothing_left" "^none$" sh -c "ls -A '$W/runtime-root/k8s.io' 2>/dev/null | grep -v '^.vetto$' | grep . || echo none"
}

run_pod plain '{}'
run_pod hardened '{"dev.vetto.policy": "default"}'

echo "cri e2e: $pass passed, $fail failed"
if [ "$fail" -eq 0 ]; then
  echo "test result: ok. $pass passed; 0 failed (cri e2e)"
else
  echo "--- containerd log (tail)"; tail -30 "$W/containerd.log"
  echo "test result: FAILED. $pass passed; $fail failed (cri e2e)"
fi
[ "$fail" -eq 0 ]
