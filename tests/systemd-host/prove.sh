#!/bin/sh
# Runs INSIDE the systemd test host as root (host.sh prove pipes it in): the stock runtimes
# with the systemd cgroup driver enforce --memory (OOM kill) and --pids-limit (fork fails) for
# Docker, Podman (root: crun and runc; rootless as "tester"), and containerd (ctr, runc shim).
# Each limit is checked against a control run without the limit. Prints PASS/FAIL lines.
# With VETTO_SHIM=/path/to/vetto-shim (host.sh prove SHIM), every engine runs vetto-shim
# instead (Docker: a "vetto" runtime in daemon.json; Podman --runtime; ctr --runc-binary), and
# Docker's `update` and `stats` paths are checked too.
set -u
SHIM=${VETTO_SHIM:-}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $*"; }
ko() { fail=$((fail + 1)); echo "FAIL $*"; }
TAR=/opt/vetto/busybox-rootfs.tar
# 64 MiB buffer filled by read(): past a 32 MiB limit → OOM kill (137).
MEM='cat /sys/fs/cgroup/memory.max 2>/dev/null; dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null && echo survived'
# 40 background sleeps: past a pids limit of 20 → "can't fork" (ash exits 2).
PIDS='n=0; for i in $(seq 40); do sleep 2 & n=$((n+1)); done; wait; echo forked=$n'
W=/var/lib/vetto-prove
# oomlog NAME CGROUP: the kernel's oom-kill record names the memcg that hit its limit.
oomlog() {
  if dmesg | grep "oom-kill:" | grep -q "oom_memcg=$2[ ,/]"; then ok "$1 (kernel: oom_memcg=$2)"
  else ko "$1: no oom-kill with oom_memcg=$2 in dmesg: $(dmesg | grep oom-kill: | tail -1)"; fi
}
mkdir -p $W

# expect NAME WANT_RC OUTPUT_PATTERN CMD...: run CMD, check its exit code and output.
expect() {
  name=$1 want=$2 pat=$3
  shift 3
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" = "$want" ] && { [ "$pat" = - ] || printf '%s\n' "$out" | grep -q -- "$pat"; }; then
    ok "$name (rc=$rc)"
  else
    ko "$name: rc=$rc (want $want, /$pat/): $(printf '%s' "$out" | tr '\n' '|' | cut -c1-400)"
  fi
}

echo "systemd: $(systemctl is-system-running); kernel $(uname -r); cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "versions: $(docker version -f 'docker {{.Server.Version}}' 2>&1); $(podman --version); $(containerd --version | cut -d' ' -f1,3); $(runc --version | head -1); $(crun --version | head -1)"

# --- docker (runc or vetto-shim, native.cgroupdriver=systemd) ------------------------------------
DRT=
if [ -n "$SHIM" ]; then
  printf '{"runtimes": {"vetto": {"path": "%s"}}, "exec-opts": ["native.cgroupdriver=systemd"]}\n' "$SHIM" >/etc/docker/daemon.json
  systemctl restart docker
  DRT="--runtime vetto"
  echo "vetto-shim: $($SHIM --version 2>&1 | head -1)"
fi
docker image inspect busybox:local >/dev/null 2>&1 || docker import $TAR busybox:local >/dev/null
echo "docker cgroup driver: $(docker info -f '{{.CgroupDriver}} v{{.CgroupVersion}}')"
cid=$(docker run $DRT -d busybox:local sleep 60)
expect docker.scope 0 "docker-$cid.scope" systemctl status --no-pager "docker-$cid.scope"
docker rm -f "$cid" >/dev/null
expect docker.memory.control 0 survived docker run $DRT --rm busybox:local sh -c "$MEM"
docker rm -f vp-mem >/dev/null 2>&1
expect docker.memory.oom 137 33554432 docker run $DRT --name vp-mem --memory 32m --memory-swap 32m busybox:local sh -c "$MEM"
echo "INFO docker: docker inspect OOMKilled=$(docker inspect -f '{{.State.OOMKilled}}' vp-mem)"
oomlog docker.memory.memcg "/system.slice/docker-$(docker inspect -f '{{.Id}}' vp-mem).scope"
docker rm -f vp-mem >/dev/null 2>&1
expect docker.pids.control 0 forked=40 docker run $DRT --rm busybox:local sh -c "$PIDS"
expect docker.pids.limit 2 "can't fork" docker run $DRT --rm --pids-limit 20 busybox:local sh -c "$PIDS"
if [ -n "$SHIM" ]; then
  # docker update (containerd UpdateTask -> runtime update --resources -) and docker stats.
  cid=$(docker run $DRT -d --pids-limit 50 busybox:local sleep 120)
  # vetto-shim made it: its shadow bundle (.vetto/ID) exists only under vetto-shim's state root.
  expect docker.runtime 0 "/.vetto/$cid\$" find /run -maxdepth 6 -path "*/.vetto/$cid"
  expect docker.update 0 - docker update --pids-limit 30 --memory 48m --memory-swap 48m "$cid"
  expect docker.update.pids.max 0 '^30$' cat /sys/fs/cgroup/system.slice/docker-$cid.scope/pids.max
  expect docker.update.memory.max 0 '^50331648$' cat /sys/fs/cgroup/system.slice/docker-$cid.scope/memory.max
  expect docker.stats 0 ' [1-9][0-9]*$' docker stats --no-stream --format '{{.MemUsage}} {{.PIDs}}' "$cid"
  expect docker.stats.memory 0 '48MiB' docker stats --no-stream --format '{{.MemUsage}}' "$cid"
  docker rm -f "$cid" >/dev/null
fi

# --- podman, root (cgroup_manager=systemd), crun and runc ---------------------------------------
podman image exists localhost/busybox:local || podman import -q $TAR localhost/busybox:local >/dev/null
echo "podman: $(podman info -f '{{.Host.CgroupManager}} {{.Host.CgroupsVersion}} runtime={{.Host.OCIRuntime.Name}}')"
cid=$(podman run ${SHIM:+--runtime $SHIM} -d localhost/busybox:local sleep 60)
expect podman.scope 0 "libpod-$cid.scope" systemctl status --no-pager "libpod-$cid.scope"
podman rm -f -t 0 "$cid" >/dev/null
expect podman.memory.control 0 survived podman run ${SHIM:+--runtime $SHIM} --rm localhost/busybox:local sh -c "$MEM"
expect podman.pids.control 0 forked=40 podman run ${SHIM:+--runtime $SHIM} --rm localhost/busybox:local sh -c "$PIDS"
for rt in ${SHIM:-crun runc}; do
  podman rm -f vp-mem >/dev/null 2>&1
  expect podman.${rt##*/}.memory.oom 137 33554432 podman run --runtime $rt --name vp-mem --memory 32m --memory-swap 32m localhost/busybox:local sh -c "$MEM"
  oomlog podman.${rt##*/}.memory.memcg "/machine.slice/libpod-$(podman inspect -f '{{.Id}}' vp-mem).scope"
  echo "INFO podman.$rt: podman inspect OOMKilled=$(podman inspect -f '{{.State.OOMKilled}}' vp-mem)"
  podman rm -f vp-mem >/dev/null 2>&1
  expect podman.${rt##*/}.pids.limit 2 "can't fork" podman run --runtime $rt --rm --pids-limit 20 localhost/busybox:local sh -c "$PIDS"
done

# --- containerd: ctr, runc v2 shim with --runc-systemd-cgroup ------------------------------------
if ! ctr -n vetto image ls -q | grep -q busybox:local; then
  docker save busybox:local -o $W/busybox.tar
  ctr -n vetto image import --base-name docker.io/library/busybox $W/busybox.tar >/dev/null
fi
IMG=docker.io/library/busybox:local
# (ctr's default spec mounts no cgroupfs: memory.max is read from outside, see ctr.scope.memory.max)
CTRMEM='dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null && echo survived'
ctr -n vetto run ${SHIM:+--runc-binary $SHIM} -d --runc-systemd-cgroup --cgroup system.slice:vetto-ctr:vp-scope --memory-limit 33554432 $IMG vp-scope sleep 60 >/dev/null
expect ctr.scope 0 "vetto-ctr-vp-scope.scope" systemctl status --no-pager vetto-ctr-vp-scope.scope
expect ctr.scope.memory.max 0 33554432 cat /sys/fs/cgroup/system.slice/vetto-ctr-vp-scope.scope/memory.max
ctr -n vetto task kill -s KILL vp-scope >/dev/null 2>&1; sleep 1
ctr -n vetto task rm -f vp-scope >/dev/null 2>&1; ctr -n vetto c rm vp-scope >/dev/null 2>&1
expect ctr.memory.control 0 survived ctr -n vetto run ${SHIM:+--runc-binary $SHIM} --rm --runc-systemd-cgroup --cgroup system.slice:vetto-ctr:vp-m0 $IMG vp-m0 sh -c "$CTRMEM"
expect ctr.memory.oom 137 - ctr -n vetto run ${SHIM:+--runc-binary $SHIM} --rm --runc-systemd-cgroup --cgroup system.slice:vetto-ctr:vp-m1 --memory-limit 33554432 $IMG vp-m1 sh -c "$CTRMEM"
oomlog ctr.memory.memcg /system.slice/vetto-ctr-vp-m1.scope
# ctr run has no pids flag: a full OCI spec (ctr oci spec + pids limit) with --config.
rm -rf $W/rootfs && mkdir -p $W/rootfs && tar -C $W/rootfs -xf $TAR
for lim in 0 20; do
  ctr oci spec | python3 -c '
import json, sys
s = json.load(sys.stdin)
s["root"] = {"path": sys.argv[1], "readonly": True}
s["process"]["env"] = ["PATH=/bin"]
s["process"]["args"] = ["/bin/sh", "-c", sys.argv[2]]
s["process"]["terminal"] = False
s["linux"]["cgroupsPath"] = "system.slice:vetto-ctr:vp-p" + sys.argv[3]
if int(sys.argv[3]):
    s["linux"].setdefault("resources", {})["pids"] = {"limit": int(sys.argv[3])}
json.dump(s, open(sys.argv[4], "w"))' $W/rootfs "$PIDS" $lim $W/spec-$lim.json
done
expect ctr.pids.control 0 forked=40 ctr -n vetto run ${SHIM:+--runc-binary $SHIM} --rm --runc-systemd-cgroup --cgroup system.slice:vetto-ctr:vp-p0 --config $W/spec-0.json vp-p0
expect ctr.pids.limit 2 "can't fork" ctr -n vetto run ${SHIM:+--runc-binary $SHIM} --rm --runc-systemd-cgroup --cgroup system.slice:vetto-ctr:vp-p20 --config $W/spec-20.json vp-p20

# --- rootless podman as tester (user@1000.service, cgroup_manager=systemd) -----------------------
U="runuser -u tester -- env XDG_RUNTIME_DIR=/run/user/1000 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus HOME=/home/tester"
echo "user@1000: $(systemctl is-active user@1000.service); delegated: $(cat /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/cgroup.controllers 2>&1)"
$U sh -c "cd && podman image exists localhost/busybox:local || podman import -q $TAR localhost/busybox:local >/dev/null"
echo "rootless podman: $($U sh -c 'cd && podman info -f "{{.Host.CgroupManager}} {{.Host.CgroupsVersion}} runtime={{.Host.OCIRuntime.Name}} rootless={{.Host.Security.Rootless}} controllers={{.Host.CgroupControllers}}"' 2>&1)"
expect rootless.memory.control 0 survived $U podman run ${SHIM:+--runtime $SHIM} --rm localhost/busybox:local sh -c "$MEM"
$U podman rm -f vp-mem >/dev/null 2>&1
expect rootless.memory.oom 137 33554432 $U podman run ${SHIM:+--runtime $SHIM} --name vp-mem --memory 32m --memory-swap 32m localhost/busybox:local sh -c "$MEM"
oomlog rootless.memory.memcg "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-$($U podman inspect -f '{{.Id}}' vp-mem).scope"
$U podman rm -f vp-mem >/dev/null 2>&1
expect rootless.pids.control 0 forked=40 $U podman run ${SHIM:+--runtime $SHIM} --rm localhost/busybox:local sh -c "$PIDS"
expect rootless.pids.limit 2 "can't fork" $U podman run ${SHIM:+--runtime $SHIM} --rm --pids-limit 20 localhost/busybox:local sh -c "$PIDS"

echo "prove: $pass passed, $fail failed"
[ "$fail" = 0 ]
