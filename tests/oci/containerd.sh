# Sourced by tests/oci/e2e.sh and scripts/bench_oci.sh: a containerd with everything private.
#
# start_containerd DIR LOG: writes DIR/config.toml (root, state and sockets under DIR, the CRI
# plugin off), starts containerd in the background with its output in LOG, waits until it
# answers, and sets CTD_PID and CTD_SOCK.
start_containerd() {
  local dir=$1 log=$2
  mkdir -p "$dir"
  cat >"$dir/config.toml" <<CONF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[debug]
  address = "$dir/debug.sock"
CONF
  containerd --config "$dir/config.toml" >"$log" 2>&1 &
  CTD_PID=$!
  CTD_SOCK=$dir/containerd.sock
  for _ in $(seq 1 50); do ctr -a "$CTD_SOCK" version >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
