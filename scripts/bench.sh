#!/usr/bin/env bash
# Start-up cost of a sandboxed /bin/true: vetto against bubblewrap and crun, root and
# rootless, in ONE hyperfine run, reported as means and ratios to bwrap. Then vetto's peak RSS.
# Needs: hyperfine bubblewrap crun time (scripts/deps.sh). Run as root (rootless variants use
# setpriv to become nobody).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VETTO=$(realpath "${1:-target/release/vetto}")
RUNS=${BENCH_RUNS:-60}
for t in hyperfine bwrap crun setpriv /usr/bin/time python3; do
  command -v "$t" >/dev/null || { echo "bench: $t is missing (make deps)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "bench: run as root (the rootless variants switch to nobody)" >&2; exit 1; }

work=$(mktemp -d /tmp/vetto-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/bin" "$work/proj" "$work/home" "$work/run" "$work/crun/rootfs" "$work/crun-state"
cp "$VETTO" "$work/bin/vetto"
chmod 755 "$work/bin/vetto"
echo "API_KEY=x" > "$work/proj/.env"
chown -R 65534:65534 "$work/proj" "$work/home" "$work/run" "$work/crun" "$work/crun-state"
chmod 700 "$work/run"

# A minimal crun bundle: host /usr read-only, merged-/usr symlinks, no cgroups.
for l in bin lib lib64 sbin; do [ -L "/$l" ] && ln -s "usr/$l" "$work/crun/rootfs/$l"; done
(cd "$work/crun" && crun spec --rootless)
python3 - "$work/crun/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["root"] = {"path": "rootfs", "readonly": True}
c["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro", "nosuid", "nodev"]})
c["linux"].pop("resources", None)
json.dump(c, open(p, "w"), indent=1)
PY
cp -a "$work/crun" "$work/crun-root"   # root's copy stays root-owned
chown -R 65534:65534 "$work/crun"

AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all env -i HOME=$work/home PATH=/usr/bin:/bin XDG_RUNTIME_DIR=$work/run"
P="$work/proj"
BWRAP="bwrap --ro-bind / / --tmpfs /tmp --bind $P $P --dev /dev --proc /proc --unshare-all --die-with-parent --chdir $P /bin/true"
VRUN="$work/bin/vetto run --no-user-policy -- /bin/true"
VRUN_NOAUDIT="$work/bin/vetto run --no-user-policy --no-audit -- /bin/true"
# Root's audit store for the bench is the bench's own (nobody's is under $work/home).
export XDG_STATE_HOME="$work/state-root"
CRUN="crun --root $work/crun-state --cgroup-manager=disabled run --bundle $work/crun"
CRUN_ROOT="crun --root $work/crun-state-root --cgroup-manager=disabled run --bundle $work/crun-root"

# crun 1.8 refuses to run on this cgroup-v1 hybrid host while cgroup2 holds a controller;
# it runs in a private mount namespace whose /sys/fs/cgroup is the (empty) unified hierarchy.
# That wrapper costs something of its own: it is measured alone too ("v2-view wrapper").
V2VIEW="mount --bind /sys/fs/cgroup/unified /sys/fs/cgroup && mount -o remount,bind,ro /sys/fs/cgroup"

cd "$P"
names=(); cmds=()
add() { # name command...: keep it only if it runs
  local name=$1; shift
  if "$@" >/dev/null 2>"$work/err"; then
    names+=("$name"); cmds+=("$(printf '%q ' "$@")")
  else
    echo "left out ($name): $(head -c 300 "$work/err")"
  fi
}
add "true" /bin/true
add "bwrap root" $BWRAP
add "vetto root" $VRUN
add "vetto root (no audit)" $VRUN_NOAUDIT
add "crun root" $CRUN_ROOT bench-root
if [ "${#names[@]}" -gt 0 ] && [ "${names[-1]}" != "crun root" ]; then
  add "v2-view wrapper root" unshare -m sh -c "$V2VIEW && /bin/true"
  add "crun root (v2 view)" unshare -m sh -c "$V2VIEW && exec $CRUN_ROOT bench-root-v2"
fi
add "setpriv true" $AS_NOBODY /bin/true
add "bwrap rootless" $AS_NOBODY $BWRAP
add "vetto rootless" $AS_NOBODY $VRUN
add "vetto rootless (no audit)" $AS_NOBODY $VRUN_NOAUDIT
add "crun rootless" $AS_NOBODY $CRUN bench-rl
if [ "${names[-1]}" != "crun rootless" ]; then
  add "v2-view wrapper rootless" $AS_NOBODY unshare -Urm sh -c "$V2VIEW && /bin/true"
  add "crun rootless (v2 view)" $AS_NOBODY unshare -Urm sh -c "$V2VIEW && exec $CRUN bench-rl-v2"
fi

echo "== one hyperfine run ($RUNS runs each)"
args=()
for i in "${!names[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
hyperfine --shell=bash --warmup 5 --runs "$RUNS" --export-json "$work/h.json" "${args[@]}" 2>&1 | grep -E 'Benchmark|Time' || true

python3 - "$work/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
ms = lambda n: r[n]["mean"] * 1e3 if n in r else float("nan")
print(f'{"command":<26}{"mean ms":>10}{"± ms":>8}{"× bwrap (same mode)":>22}')
for n in r:
    mode = "rootless" if "rootless" in n else "root"
    base = ms(f"bwrap {mode}")
    ratio = f'{ms(n) / base:.2f}' if n.split()[0] in ("vetto", "crun", "bwrap") else ""
    print(f'{n:<26}{ms(n):>10.2f}{r[n]["stddev"] * 1e3:>8.2f}{ratio:>22}')
for mode in ("root", "rootless"):
    on, off = f"vetto {mode}", f"vetto {mode} (no audit)"
    if on in r and off in r:
        print(f'audit on/off, {mode}: {ms(on) / ms(off):.3f}x, +{ms(on) - ms(off):.2f} ms (goal <= 0.5 ms)')
for mode in ("root", "rootless"):
    crun = next((n for n in (f"crun {mode}", f"crun {mode} (v2 view)") if n in r), None)
    if f"vetto {mode}" in r and crun:
        print(f'vetto {mode} / {crun} = {ms(f"vetto {mode}") / ms(crun):.2f}')
PY

echo "== vetto supervisor peak RSS (/usr/bin/time -v, target <= 8 MiB)"
/usr/bin/time -v $VRUN 2>&1 >/dev/null | awk -F: '/Maximum resident/ {printf "root:     %d KiB\n", $2}'
$AS_NOBODY /usr/bin/time -v $VRUN 2>&1 >/dev/null | awk -F: '/Maximum resident/ {printf "rootless: %d KiB\n", $2}'
echo "== vetto phase timings (-v, rootless, one run)"
$AS_NOBODY NO_COLOR=1 RUST_LOG=vetto=info $VRUN 2>&1 >/dev/null | grep -oE 'phase="?[a-z ]+"? ms="?[0-9.]+"?' || true

echo
echo "== network broker: one transfer, sequential connections, idle connections (root, loopback only)"
NPORT=$((20000 + RANDOM % 20000))
cp "$HERE/bench_net.py" "$P/bench_net.py"
chmod 644 "$P/bench_net.py"
printf '[network]\nmode = "allowlist"\nallow_cidrs = ["127.0.0.2/32:%s"]\nconnects_per_minute = 100000\nmax_connections = 2048\n' "$NPORT" > "$work/net.toml"
python3 "$P/bench_net.py" server 127.0.0.2 "$NPORT" > "$work/srv.out" 2>&1 &
SRV=$!
for _ in $(seq 50); do grep -q ready "$work/srv.out" && break; sleep 0.1; done
BYTES=$((1 << 30))
NET="$work/bin/vetto run --no-user-policy --policy $work/net.toml --"
direct_bulk=$(python3 "$P/bench_net.py" bulk direct 127.0.0.2 "$NPORT" "$BYTES")
broker_bulk=$($NET python3 bench_net.py bulk 127.0.0.1:3128 127.0.0.2 "$NPORT" "$BYTES")
read -r d50 d90 < <(python3 "$P/bench_net.py" conns direct 127.0.0.2 "$NPORT" 1000)
read -r b50 b90 < <($NET python3 bench_net.py conns 127.0.0.1:3128 127.0.0.2 "$NPORT" 1000)
python3 - "$direct_bulk" "$broker_bulk" "$d50" "$b50" "$d90" "$b90" <<'PY'
import sys
db, bb, d50, b50, d90, b90 = map(float, sys.argv[1:])
print(f"1 GiB transfer: direct {db:.0f} MB/s, through the broker {bb:.0f} MB/s = {bb / db:.2f}x direct (target >= 0.8)")
print(f"1000 sequential connections, connect+first byte: direct p50 {d50:.3f} ms, broker p50 {b50:.3f} ms,"
      f" added p50 {b50 - d50:.3f} ms (target <= 1 ms); p90 {d90:.3f} / {b90:.3f} ms")
PY
$NET python3 bench_net.py idle 127.0.0.1:3128 127.0.0.2 "$NPORT" 1000 4 > "$work/idle.out" 2>&1 &
IDLE=$!
for _ in $(seq 100); do grep -q holding "$work/idle.out" && break; sleep 0.1; done
bpid=$(pgrep -f "vetto __broker" | head -1 || true)
if [ -n "$bpid" ]; then
  echo "1000 idle connections held ($(cat "$work/idle.out")): broker $(grep -E 'VmRSS' /proc/"$bpid"/status | tr -s ' \t' ' ') (target <= 30 MiB)"
else
  echo "idle connections: broker not found ($(cat "$work/idle.out"))"
fi
wait "$IDLE" || true
kill "$SRV" 2>/dev/null || true

echo
echo "== audit store: events/s into SQLite + JSONL with the chain and checkpoints"
AB="$(dirname "$VETTO")/examples/audit_bench"
if [ -x "$AB" ]; then
  "$AB" "$work/audit-bench" "${BENCH_AUDIT_EVENTS:-100000}"
else
  echo "left out: $AB is missing (make bench builds it)"
fi

echo
echo "== approvals: latency a persistent grant adds over an allowlist entry (the broker in-process, loopback only)"
APB="$(dirname "$VETTO")/examples/approval_bench"
if [ -x "$APB" ]; then
  "$APB" "$work/approval-bench" "${BENCH_APPROVAL_CONNECTIONS:-1000}"
else
  echo "left out: $APB is missing (make bench builds it)"
fi

echo
bash "$HERE/bench_oci.sh" "$(dirname "$VETTO")/vetto-shim"
