#!/usr/bin/env bash
# A disposable "systemd + unified cgroup v2" test host for vetto-shim, for machines that have
# neither (here: hybrid cgroup v1/v2, no systemd as PID 1). Two backends share one cached
# Debian 12 root:
#   vm      the root as an ext4 disk, booted with its own Debian 6.1 kernel in QEMU (TCG: this
#           machine's /dev/kvm is PVM-only and cannot run a stock kernel). systemd 252 PID 1,
#           cgroup2 with every controller (memory, pids, cpu, ...). No NIC at all: loopback and
#           the container bridges inside only. Commands go through qemu-guest-agent.
#   nspawn  systemd-nspawn -b, own cgroup namespace, writable cgroup2, --private-network.
#           Native speed, but cgroup2 only gets the controllers the host's cgroup2 has, and
#           here memory/pids/cpu are bound to v1 hierarchies that others use (see `controllers`).
#   auto    (default) nspawn if the host cgroup2 offers memory, pids and cpu, else vm.
#
# usage: tests/systemd-host/host.sh build          debootstrap (or reuse) the cached root + disk
#        tests/systemd-host/host.sh boot           boot it; waits for systemd running/degraded
#        tests/systemd-host/host.sh exec [-i] CMD...  run CMD inside as root (-i: pass stdin)
#        tests/systemd-host/host.sh user [-i] CMD...  run CMD as "tester" (uid 1000, lingering
#                                                  user@1000.service, XDG_RUNTIME_DIR set)
#        tests/systemd-host/host.sh prove          docker/podman/containerd/rootless limit checks
#        tests/systemd-host/host.sh status         backend, systemd state, controllers
#        tests/systemd-host/host.sh controllers    which v1 controllers could move to cgroup2
#        tests/systemd-host/host.sh stop           power off, undo every host change
#        tests/systemd-host/host.sh clean          stop, then delete the whole cache
#
# Inside: the repository is at the same path read-only (9p in the vm, bind in nspawn), e.g.
# $REPO/target/debug/vetto-shim; $STATE/share on the host is /host-share inside (read-write).
# Every boot starts from the pristine cached root (vm: qcow2 overlay; nspawn: overlayfs + scratch
# dirs under $STATE); images, containers and files written inside are gone after `stop`.
# `exec` output arrives when CMD ends in the vm (guest-exec captures, no streaming).
# Images: none pulled (no registry); /opt/vetto/busybox-rootfs.tar is a busybox-static rootfs to
# `docker import` / `podman import`; `prove` imports it as busybox:local.
#
# Environment:
#   VETTO_SYSTEMD_HOST_CACHE    cache (default /var/cache/vetto-systemd-host)
#   VETTO_SYSTEMD_HOST_STATE    runtime state + scratch (default $CACHE/run), removed by stop
#   VETTO_SYSTEMD_HOST_BACKEND  vm | nspawn | auto (default auto)
#   VETTO_SYSTEMD_HOST_VCPUS / _MEM   vm size (default 2 / 3072 MiB)
#   VETTO_SYSTEMD_HOST_MOVE_CONTROLLERS  nspawn only, opt-in, e.g. "cpu pids": unmount these
#                               v1 hierarchies if they have no child groups, so the controllers
#                               go to cgroup2; stop re-mounts them. Never done by default.
#   VETTO_SYSTEMD_HOST_MIRROR   Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT=$HERE/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${VETTO_SYSTEMD_HOST_CACHE:-/var/cache/vetto-systemd-host}
STATE=${VETTO_SYSTEMD_HOST_STATE:-$CACHE/run}
MIRROR=${VETTO_SYSTEMD_HOST_MIRROR:-http://deb.debian.org/debian}
VCPUS=${VETTO_SYSTEMD_HOST_VCPUS:-2}
MEM=${VETTO_SYSTEMD_HOST_MEM:-3072}
SUITE=bookworm
MACHINE=vetto-host
CGNAME=vetto-systemd-host
CG2=/sys/fs/cgroup/unified
[ -e /sys/fs/cgroup/cgroup.controllers ] && CG2=/sys/fs/cgroup
TESTER_ENV=(XDG_RUNTIME_DIR=/run/user/1000 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus
  HOME=/home/tester USER=tester LOGNAME=tester)

PACKAGES=(
  systemd systemd-sysv dbus dbus-user-session libpam-systemd udev
  podman docker.io containerd runc crun conmon catatonit apparmor
  uidmap slirp4netns fuse-overlayfs containernetworking-plugins iptables
  busybox-static iproute2 ca-certificates procps kmod less
  gcc libc6-dev python3
  linux-image-amd64 qemu-guest-agent qemu-system-x86 qemu-utils e2fsprogs
)

log() { printf '[systemd-host] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root"

need_host_tools() {
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v systemd-nspawn >/dev/null || missing+=(systemd-container)
  command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing on the host: ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${missing[@]}" >&2
  fi
}

# --- build ------------------------------------------------------------------------------------
# configure_root ROOT: everything done to a fresh debootstrap root (part of the cache key).
configure_root() {
  local r=$1 u a b
  echo "$MACHINE" >"$r/etc/hostname"
  printf '127.0.0.1 localhost %s\n::1 localhost\n' "$MACHINE" >"$r/etc/hosts"
  : >"$r/etc/resolv.conf"
  : >"$r/etc/fstab"
  printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$r/etc/apt/sources.list"
  mkdir -p "$r/vm" "$r/host-share" "$r/work"
  # Units that only make noise, or loop on a container's missing console.
  for u in console-getty.service getty@tty1.service systemd-timesyncd.service apt-daily.timer \
    apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  # Docker: systemd cgroup driver (also its default on cgroup v2 with systemd), overlay2.
  mkdir -p "$r/etc/docker"
  cat >"$r/etc/docker/daemon.json" <<'EOF'
{
  "exec-opts": ["native.cgroupdriver=systemd"],
  "storage-driver": "overlay2"
}
EOF
  # containerd: the CRI runc v2 shim with SystemdCgroup (ctr itself needs --runc-systemd-cgroup).
  mkdir -p "$r/etc/containerd"
  cat >"$r/etc/containerd/config.toml" <<'EOF'
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
  # Podman (root and rootless): systemd cgroup manager, no registries.
  mkdir -p "$r/etc/containers"
  printf '[engine]\ncgroup_manager = "systemd"\n' >"$r/etc/containers/containers.conf"
  printf 'unqualified-search-registries = []\n' >"$r/etc/containers/registries.conf"
  # An unprivileged user with a lingering systemd user session (user@1000.service).
  chroot "$r" useradd -m -u 1000 -s /bin/bash tester
  echo "tester:100000:65536" >"$r/etc/subuid"
  echo "tester:100000:65536" >"$r/etc/subgid"
  mkdir -p "$r/var/lib/systemd/linger"
  : >"$r/var/lib/systemd/linger/tester"
  # A busybox rootfs tarball to import as an image (there is no registry).
  b=$(mktemp -d)
  mkdir -p "$b"/{bin,dev,etc,proc,sys,tmp,root}
  cp "$r/bin/busybox" "$b/bin/busybox"
  for a in $(chroot "$r" /bin/busybox --list); do
    [ "$a" = busybox ] || ln -s busybox "$b/bin/$a"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$b/etc/passwd"
  echo 'root:x:0:' >"$b/etc/group"
  mkdir -p "$r/opt/vetto"
  tar -C "$b" -cf "$r/opt/vetto/busybox-rootfs.tar" .
  rm -rf "$b"
  # Kernel + initrd at fixed names for the vm backend.
  ln -sf "$(basename "$(ls "$r"/boot/vmlinuz-* | sort -V | tail -1)")" "$r/boot/vmlinuz"
  ln -sf "$(basename "$(ls "$r"/boot/initrd.img-* | sort -V | tail -1)")" "$r/boot/initrd.img"
  chroot "$r" apt-get clean
  rm -rf "$r/var/lib/apt/lists/"*
}

# make_disk ROOT IMAGE: the vm backend's base disk (raw ext4, sparse), a copy of ROOT.
make_disk() {
  mkfs.ext4 -q -F -L vetto-host -E root_owner=0:0 -d "$1" "$2" 10G
}

cache_key() {
  { printf '%s\n' "$SUITE" "$MIRROR" "${PACKAGES[@]}"; declare -f configure_root make_disk; } |
    sha256sum | cut -c1-16
}
root_dir() { echo "$CACHE/roots/$(cache_key)"; }

cmd_build() {
  need_host_tools
  local root
  root=$(root_dir)
  if [ -e "$root/.complete" ] && [ -e "$root.img" ]; then
    log "cached: $root (+ .img)"
    return 0
  fi
  mkdir -p "$CACHE/roots"
  local tmp=$root.tmp
  rm -rf "$tmp" "$root.img.tmp"
  log "debootstrap $SUITE into $tmp (cold build)"
  local inc
  inc=$(IFS=,; echo "${PACKAGES[*]}")
  debootstrap --variant=minbase --include="$inc" "$SUITE" "$tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  configure_root "$tmp"
  touch "$tmp/.complete"
  log "making the vm disk"
  make_disk "$tmp" "$root.img.tmp"
  mv "$tmp" "$root"
  mv "$root.img.tmp" "$root.img"
  log "built $root ($(du -sh "$root" | cut -f1), disk $(du -sh "$root.img" | cut -f1) used)"
  # Roots of other keys (older package lists / build functions) are stale.
  local old
  for old in "$CACHE"/roots/*; do
    case "$old" in "$root" | "$root.img") ;; *) log "removing stale $old"; rm -rf "$old" ;; esac
  done
}

# --- state ------------------------------------------------------------------------------------
backend() { cat "$STATE/backend" 2>/dev/null || true; }
running() {
  local pid
  pid=$(cat "$STATE/pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null
}
pick_backend() {
  local b=${VETTO_SYSTEMD_HOST_BACKEND:-auto} have c
  if [ "$b" = auto ]; then
    have=$(cat "$CG2/cgroup.controllers" 2>/dev/null || true)
    b=nspawn
    for c in memory pids cpu; do
      [[ " $have " == *" $c "* ]] || b=vm
    done
  fi
  case "$b" in vm | nspawn) echo "$b" ;; *) die "VETTO_SYSTEMD_HOST_BACKEND: vm, nspawn or auto" ;; esac
}

# --- controllers ------------------------------------------------------------------------------
cmd_controllers() {
  local c dir kids
  echo "host cgroup2 ($CG2) controllers: $(cat "$CG2/cgroup.controllers" 2>/dev/null)"
  for c in memory pids cpu; do
    dir=/sys/fs/cgroup/$c
    if ! findmnt -n -t cgroup "$dir" >/dev/null 2>&1; then
      echo "$c: no v1 hierarchy mounted at $dir"
      continue
    fi
    kids=$(find "$dir" -mindepth 1 -maxdepth 1 -type d -printf '%f ' 2>/dev/null)
    if [ -n "$kids" ]; then
      echo "$c: NOT movable, v1 child groups (not ours): $kids"
    else
      echo "$c: movable: umount $dir (restore: mount -t cgroup -o $(findmnt -no OPTIONS "$dir") cgroup $dir)"
    fi
  done
}

# Opt-in (VETTO_SYSTEMD_HOST_MOVE_CONTROLLERS): move empty v1 controllers to cgroup2.
move_controllers() {
  local c dir opts i
  for c in ${VETTO_SYSTEMD_HOST_MOVE_CONTROLLERS:-}; do
    dir=/sys/fs/cgroup/$c
    findmnt -n -t cgroup "$dir" >/dev/null 2>&1 || { log "$c: no v1 mount at $dir, skipped"; continue; }
    if [ -n "$(find "$dir" -mindepth 1 -maxdepth 1 -type d)" ]; then
      log "$c: v1 hierarchy has child groups that are not ours, skipped"
      continue
    fi
    opts=$(findmnt -no OPTIONS "$dir")
    umount "$dir"
    echo "$c $dir $opts" >>"$STATE/moved"
    for i in $(seq 50); do
      grep -qw "$c" "$CG2/cgroup.controllers" && break
      sleep 0.1
    done
    if grep -qw "$c" "$CG2/cgroup.controllers"; then
      echo "+$c" >"$CG2/cgroup.subtree_control" && echo "$c" >>"$STATE/enabled"
      log "$c: moved to cgroup2 (host change; stop re-mounts $dir)"
    else
      log "$c: did not appear in cgroup2 after umount"
    fi
  done
}

restore_controllers() {
  local c dir opts
  [ ! -e "$STATE/enabled" ] || while read -r c; do
    echo "-$c" >"$CG2/cgroup.subtree_control" || log "could not disable $c in $CG2"
  done <"$STATE/enabled"
  [ ! -e "$STATE/moved" ] || while read -r c dir opts; do
    mount -t cgroup -o "$opts" cgroup "$dir" && log "$c: v1 hierarchy re-mounted at $dir" ||
      log "WARNING: could not re-mount $c at $dir: run 'mount -t cgroup -o $opts cgroup $dir'"
  done <"$STATE/moved"
  rm -f "$STATE/enabled" "$STATE/moved"
}

# --- nspawn backend ---------------------------------------------------------------------------
boot_nspawn() {
  local root=$1 c
  mkdir -p "$STATE"/{upper,work,merged,share,lib-docker,lib-containerd,lib-containers,home}
  mount -t overlay overlay -o "lowerdir=$root,upperdir=$STATE/upper,workdir=$STATE/work" "$STATE/merged"
  echo "$STATE/merged" >"$STATE/mounts"
  cp -a "$root/home/." "$STATE/home/"
  mkdir -p "$STATE/merged$REPO"
  move_controllers
  mkdir -p "$CG2/$CGNAME"
  echo "$CG2/$CGNAME" >"$STATE/cgroups"
  [ -d /sys/fs/cgroup/systemd ] && echo "/sys/fs/cgroup/systemd/$CGNAME" >>"$STATE/cgroups"
  for c in $(cat "$CG2/$CGNAME/cgroup.controllers"); do echo "+$c" >"$CG2/$CGNAME/cgroup.subtree_control" || true; done
  # Podman's default pids limit (2048) makes runc fail where cgroup2 has no pids controller.
  grep -qw pids "$CG2/$CGNAME/cgroup.controllers" ||
    printf '[containers]\npids_limit = 0\n' >>"$STATE/merged/etc/containers/containers.conf"
  # crun 1.8 raises RLIMIT_MEMLOCK to infinity before loading its cgroup2 device filter; that
  # needs CAP_SYS_RESOURCE, which this machine's bounding set lacks: use runc for podman.
  local capbnd
  capbnd=$(awk '/^CapBnd/{print $2}' /proc/self/status)
  if ! (( (0x$capbnd >> 24) & 1 )); then
    sed -i 's/^\[engine\]$/[engine]\nruntime = "runc"/' "$STATE/merged/etc/containers/containers.conf"
  fi
  # setsid: own session; the shell moves itself into our cgroup, nspawn then creates
  # supervisor/ and payload/ below it and gives the payload its own cgroup namespace.
  SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 SYSTEMD_SECCOMP=0 setsid bash -c '
    echo $$ >"$1/cgroup.procs"; shift
    exec systemd-nspawn "$@"' _ "$CG2/$CGNAME" \
    -D "$STATE/merged" -M "$MACHINE" -b --register=no --keep-unit \
    --capability=all --private-network --console=read-only --resolv-conf=off --timezone=off \
    --link-journal=no --bind=/dev/fuse --bind=/dev/net/tun \
    --bind="$STATE/lib-docker:/var/lib/docker" --bind="$STATE/lib-containerd:/var/lib/containerd" \
    --bind="$STATE/lib-containers:/var/lib/containers" --bind="$STATE/home:/home" \
    --bind="$STATE/share:/host-share" --bind-ro="$REPO:$REPO" \
    >"$STATE/console.log" 2>&1 </dev/null &
  echo $! >"$STATE/pid"
  local leader="" i
  for i in $(seq 100); do
    leader=$(pgrep -P "$(cat "$STATE/pid")" 2>/dev/null | head -1 || true)
    [ -n "$leader" ] && break
    running || { tail -20 "$STATE/console.log" >&2; die "systemd-nspawn exited"; }
    sleep 0.1
  done
  [ -n "$leader" ] || die "no container leader process"
  echo "$leader" >"$STATE/leader"
}

exec_nspawn() {
  local leader
  leader=$(cat "$STATE/leader")
  # systemd-run puts CMD in a transient unit of the container's systemd (its cgroup tree)
  # instead of our cgroup outside the container's cgroup namespace.
  nsenter -t "$leader" -a -- systemd-run --quiet --pipe --wait --collect --service-type=exec \
    -p KillMode=mixed "$@"
}
exec_nspawn_user() {
  local leader
  leader=$(cat "$STATE/leader")
  nsenter -t "$leader" -a -- systemd-run --quiet --pipe --wait --collect --service-type=exec \
    --uid=tester -p WorkingDirectory=/home/tester -p "Environment=${TESTER_ENV[*]}" "$@"
}

stop_nspawn() {
  local leader pid cg i
  leader=$(cat "$STATE/leader" 2>/dev/null || true)
  pid=$(cat "$STATE/pid" 2>/dev/null || true)
  if running; then
    [ -n "$leader" ] && kill -RTMIN+4 "$leader" 2>/dev/null || true  # systemd: poweroff
    for i in $(seq 60); do running || break; sleep 0.5; done
    if running; then log "nspawn still running, SIGTERM"; kill "$pid" || true; sleep 3; fi
    if running; then kill -KILL "$pid" || true; sleep 1; fi
  fi
  if [ -e "$STATE/mounts" ]; then
    while read -r m; do
      mountpoint -q "$m" && { umount "$m" || umount -l "$m"; }
    done <"$STATE/mounts"
  fi
  if [ -e "$STATE/cgroups" ]; then
    while read -r cg; do
      [ -d "$cg" ] || continue
      # Anything left in our subtree is ours (the container's); kill it, then remove depth-first.
      for i in $(seq 20); do
        find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [ -d "$cg" ] || break
        sleep 0.2
      done
      if [ -d "$cg" ]; then log "WARNING: could not remove cgroup $cg"; fi
    done <"$STATE/cgroups"
  fi
  restore_controllers
}

# --- vm backend -------------------------------------------------------------------------------
# One client at a time: the agent's socket serves a single connection (flock serializes).
QGA() { flock "$STATE/qga.lock" python3 "$HERE/qga.py" "$STATE/qga.sock" "$@"; }

boot_vm() {
  local root=$1
  mkdir -p "$STATE/share" "$STATE/repo"
  : >"$STATE/base.img"
  # Everything below runs in a private mount namespace: the binds vanish with qemu.
  local cmdline="root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 panic=-1"
  setsid unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 state=$2 repo=$3; shift 3
    mount --bind /dev "$root/dev"
    mount -t proc proc "$root/proc"
    mount --bind "$state" "$root/vm"
    mount --bind -o ro "$root.img" "$root/vm/base.img"
    mount --bind -o ro "$repo" "$root/vm/repo"
    chroot "$root" qemu-img create -q -f qcow2 -F raw -b /vm/base.img /vm/disk.qcow2
    exec chroot "$root" "$@"' _ "$root" "$STATE" "$REPO" \
    qemu-system-x86_64 -M q35 -accel tcg,thread=multi -cpu max -smp "$VCPUS" -m "$MEM" \
    -nodefaults -no-user-config -display none -no-reboot \
    -kernel /boot/vmlinuz -initrd /boot/initrd.img -append "$cmdline" \
    -drive file=/vm/disk.qcow2,if=virtio,format=qcow2,discard=unmap \
    -virtfs local,path=/vm/repo,mount_tag=repo,security_model=none,readonly=on \
    -virtfs local,path=/vm/share,mount_tag=share,security_model=none \
    -object rng-random,filename=/dev/urandom,id=rng0 -device virtio-rng-pci,rng=rng0 \
    -device virtio-serial-pci -chardev socket,path=/vm/qga.sock,server=on,wait=off,id=qga0 \
    -device virtserialport,chardev=qga0,name=org.qemu.guest_agent.0 \
    -serial file:/vm/console.log -nic none \
    >"$STATE/qemu.log" 2>&1 </dev/null &
  echo $! >"$STATE/pid"
}

vm_mounts() {
  QGA -- sh -c "mkdir -p '$REPO' /host-share &&
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=mmap,msize=262144 repo '$REPO' &&
    mount -t 9p -o trans=virtio,version=9p2000.L,cache=mmap,msize=262144 share /host-share"
}

exec_vm() { QGA --stdin=${STDIN:-0} -- "$@"; }
exec_vm_user() {
  QGA --stdin=${STDIN:-0} -- runuser -u tester -- env "${TESTER_ENV[@]}" sh -c 'cd && exec "$@"' sh "$@"
}

stop_vm() {
  local pid i
  pid=$(cat "$STATE/pid" 2>/dev/null || true)
  if running; then
    QGA --timeout 10 -- systemctl poweroff --no-block >/dev/null 2>&1 || true
    for i in $(seq 120); do running || break; sleep 0.5; done
    if running; then log "qemu still running, SIGTERM"; kill "$pid" || true; sleep 3; fi
    if running; then kill -KILL "$pid" || true; sleep 1; fi
  fi
}

# --- commands ---------------------------------------------------------------------------------
cmd_boot() {
  if running; then log "already running ($(backend))"; return 0; fi
  [ -e "$STATE" ] && cmd_stop
  cmd_build
  local root b t0=$SECONDS state
  root=$(root_dir)
  b=$(pick_backend)
  mkdir -p "$STATE"
  echo "$b" >"$STATE/backend"
  log "booting ($b backend)"
  "boot_$b" "$root"
  # systemd inside: wait for running/degraded.
  for _ in $(seq 600); do
    running || { tail -30 "$STATE/console.log" >&2 2>/dev/null; die "$b exited during boot (see $STATE)"; }
    if [ "$b" = vm ]; then
      state=$(QGA --timeout 5 -- systemctl is-system-running 2>/dev/null || true)
    else
      state=$(nsenter -t "$(cat "$STATE/leader")" -a systemctl is-system-running 2>/dev/null || true)
    fi
    case "$state" in running | degraded) break ;; esac
    sleep 1
  done
  if [ "$b" = vm ]; then vm_mounts; fi
  log "up after $((SECONDS - t0))s: systemd $state"
  [ "$state" = degraded ] && cmd_exec systemctl --failed --no-legend >&2 || true
  case "$state" in running | degraded) ;; *) die "systemd state: '${state:-none}'" ;; esac
}

cmd_exec() {
  running || die "not booted (host.sh boot)"
  STDIN=0
  [ "${1:-}" = -i ] && { STDIN=1; shift; }
  [ $# -gt 0 ] || die "exec: no command"
  if [ "$(backend)" = vm ]; then exec_vm "$@"; else
    if [ $STDIN = 1 ]; then exec_nspawn "$@"; else exec_nspawn "$@" </dev/null; fi
  fi
}

cmd_user() {
  running || die "not booted (host.sh boot)"
  STDIN=0
  [ "${1:-}" = -i ] && { STDIN=1; shift; }
  [ $# -gt 0 ] || die "user: no command"
  if [ "$(backend)" = vm ]; then exec_vm_user "$@"; else
    if [ $STDIN = 1 ]; then exec_nspawn_user "$@"; else exec_nspawn_user "$@" </dev/null; fi
  fi
}

cmd_status() {
  if ! running; then echo "not running"; [ -e "$STATE" ] && echo "(stale state in $STATE)"; return 0; fi
  echo "backend: $(backend)  pid: $(cat "$STATE/pid")  state dir: $STATE"
  cmd_exec sh -c 'echo "systemd: $(systemctl is-system-running)"; echo "kernel: $(uname -r)";
    echo "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"'
  [ ! -e "$STATE/moved" ] || echo "host change: v1 controllers moved to cgroup2: $(cut -d' ' -f1 "$STATE/moved" | xargs)"
  return 0
}

cmd_stop() {
  local b
  b=$(backend)
  case "$b" in
    vm) stop_vm ;;
    nspawn) stop_nspawn ;;
  esac
  if [ -e "$STATE" ]; then
    ! running || die "still running, $STATE kept"
    rm -rf "$STATE"
  fi
  log "stopped; nothing left in $STATE"
}

cmd_prove() {
  running || die "not booted (host.sh boot)"
  # prove [SHIM]: with a vetto-shim path (as seen inside), every engine runs it. The script
  # is a file in the shared directory, run with stdin from /dev/null: fed on stdin, the
  # containers it starts (ctr run attaches stdin) would eat the rest of it.
  { printf 'VETTO_SHIM=%q\n' "${1:-}"; cat "$HERE/prove.sh"; } >"$STATE/share/prove.sh"
  if [ "$(backend)" = vm ]; then
    QGA --timeout 3600 -- sh -c 'sh /host-share/prove.sh </dev/null'
  else
    exec_nspawn sh -c 'sh /host-share/prove.sh </dev/null'
  fi
}

case "${1:-}" in
  build) cmd_build ;;
  boot) cmd_boot ;;
  exec) shift; cmd_exec "$@" ;;
  user) shift; cmd_user "$@" ;;
  status) cmd_status ;;
  controllers) cmd_controllers ;;
  prove) shift; cmd_prove "$@" ;;
  stop) cmd_stop ;;
  clean) cmd_stop; rm -rf "$CACHE"; log "removed $CACHE" ;;
  *) sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
