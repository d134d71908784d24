#!/usr/bin/env bash
# vetto-shim as an OCI runtime against runc and crun, in ONE hyperfine run:
#  1. create + start + delete of the same minimal bundle (busybox rootfs, /bin/true);
#  2. `ctr run --rm` through each runtime, against a private containerd.
# Reported as means and ratios (targets: vetto-shim no slower than runc, within 1.5x of crun).
# usage: scripts/bench_oci.sh path/to/vetto-shim      (root; make bench calls it)
set -euo pipefail
SHIM=$(realpath "$1")
RUNS=${RUNS:-40}
for t in hyperfine runc crun containerd ctr busybox python3; do
  command -v "$t" >/dev/null || { echo "bench_oci: $t missing (make deps)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/vetto-bench-oci.XXXXXX)
CTD_PID=
cleanup() {
  if [ -n "$CTD_PID" ]; then kill "$CTD_PID" 2>/dev/null; wait "$CTD_PID" 2>/dev/null || true; fi
  grep -F " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

b=$work/bundle
mkdir -p "$b/rootfs/bin" "$b/rootfs/proc" "$b/rootfs/dev" "$b/rootfs/sys" "$b/rootfs/tmp"
cp "$(command -v busybox)" "$b/rootfs/bin/busybox"
ln -s busybox "$b/rootfs/bin/true"
ln -s busybox "$b/rootfs/bin/sh"
(cd "$b" && runc spec)
python3 - "$b/config.json" <<'PY'
import json, sys
p = sys.argv[1]
s = json.load(open(p))
s["process"]["terminal"] = False
s["process"]["args"] = ["/bin/true"]
s["linux"]["cgroupsPath"] = "/vetto-bench-oci"
json.dump(s, open(p, "w"), indent=1)
PY
# crun 1.8 refuses this cgroup-v1 hybrid host: it runs with cgroups disabled in a private
# mount namespace whose /sys/fs/cgroup is the unified hierarchy (the wrapper is timed alone).
V2VIEW="mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && mount -o remount,bind,ro /sys/fs/cgroup"

lifecycle() { # runtime-command... : one create+start+delete, unique id
  printf '%s' "id=b\$RANDOM\$RANDOM; $* create --bundle $b \$id >/dev/null 2>&1 && $* start \$id && $* delete --force \$id"
}
names=(); cmds=()
add() { # name shell-command: kept only if it runs
  if bash -c "$2" >/dev/null 2>"$work/err"; then
    names+=("$1"); cmds+=("$2")
  else
    echo "left out ($1): $(head -c 300 "$work/err")"
  fi
}
add "runc create+start+delete" "$(lifecycle runc --root "$work/runc")"
add "vetto-shim create+start+delete" "$(lifecycle "$SHIM" --root "$work/vetto")"
add "crun create+start+delete (v2 view, no cgroups)" \
  "unshare -m sh -c '$V2VIEW && id=b\$\$; crun --cgroup-manager=disabled --root $work/crun create --bundle $b \$id >/dev/null 2>&1 && crun --root $work/crun start \$id && crun --root $work/crun delete --force \$id'"
add "v2-view wrapper alone" "unshare -m sh -c '$V2VIEW && /bin/true'"

# containerd with private state, the image imported from the same rootfs.
# shellcheck source=tests/oci/containerd.sh
. "$(dirname "$0")/../tests/oci/containerd.sh"
start_containerd "$work/containerd" "$work/containerd.log"
CTR="ctr -a $CTD_SOCK"
tar -C "$b/rootfs" -cf "$work/rootfs.tar" .
python3 - "$work" <<'PY'
# A docker-archive (what `docker save` writes) around the rootfs tarball, for `ctr import`.
import hashlib, json, os, sys, tarfile
w = sys.argv[1]
layer = open(os.path.join(w, "rootfs.tar"), "rb").read()
diff = "sha256:" + hashlib.sha256(layer).hexdigest()
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/true"]},
                  "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode()
cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
manifest = json.dumps([{"Config": cfg_name, "RepoTags": ["localhost/vetto-bench:latest"],
                        "Layers": ["layer/layer.tar"]}]).encode()
with tarfile.open(os.path.join(w, "image.tar"), "w") as t:
    for name, data in ((cfg_name, cfg), ("layer/layer.tar", layer), ("manifest.json", manifest)):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
PY
$CTR images import --snapshotter native "$work/image.tar" >/dev/null
IMG=localhost/vetto-bench:latest
ctr_run() { printf '%s' "$CTR run --rm --snapshotter native --runc-binary $1 $IMG c\$RANDOM\$RANDOM /bin/true"; }
add "ctr run --rm, runc" "$(ctr_run "$(command -v runc)")"
add "ctr run --rm, vetto-shim" "$(ctr_run "$SHIM")"
add "ctr run --rm, crun" "$(ctr_run "$(command -v crun)")"

echo "== OCI runtimes: one hyperfine run ($RUNS runs each)"
args=()
for i in "${!names[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
hyperfine --shell=bash --warmup 3 --runs "$RUNS" --export-json "$work/h.json" "${args[@]}" 2>&1 | grep -E 'Benchmark|Time' || true
python3 - "$work/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
ms = lambda n: r[n]["mean"] * 1000
for n in r:
    print(f'{n:50s} {ms(n):7.1f} ms ± {r[n]["stddev"] * 1000:.1f}')
def ratio(a, b, target):
    if a in r and b in r:
        print(f'{a} / {b} = {ms(a) / ms(b):.2f}  ({target})')
ratio("vetto-shim create+start+delete", "runc create+start+delete", "target <= 1.0")
ratio("vetto-shim create+start+delete", "crun create+start+delete (v2 view, no cgroups)", "target <= 1.5; crun without cgroups, wrapper included")
ratio("ctr run --rm, vetto-shim", "ctr run --rm, runc", "target <= 1.0")
ratio("ctr run --rm, vetto-shim", "ctr run --rm, crun", "target <= 1.5")
PY
