#!/usr/bin/env bash
# Start-up cost of a sandboxed /bin/true: vetto against bubblewrap and crun, root and
# rootless, in ONE hyperfine run, reported as means and ratios to bwrap. Then vetto's peak RSS.
# Needs: hyperfine bubblewrap crun time (scripts/deps.sh). Run as root (rootless variants use
# setpriv to become nobody).
set -euo pipefail
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
add "crun root" $CRUN_ROOT bench-root
if [ "${#names[@]}" -gt 0 ] && [ "${names[-1]}" != "crun root" ]; then
  add "v2-view wrapper root" unshare -m sh -c "$V2VIEW && /bin/true"
  add "crun root (v2 view)" unshare -m sh -c "$V2VIEW && exec $CRUN_ROOT bench-root-v2"
fi
add "setpriv true" $AS_NOBODY /bin/true
add "bwrap rootless" $AS_NOBODY $BWRAP
add "vetto rootless" $AS_NOBODY $VRUN
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
    crun = next((n for n in (f"crun {mode}", f"crun {mode} (v2 view)") if n in r), None)
    if f"vetto {mode}" in r and crun:
        print(f'vetto {mode} / {crun} = {ms(f"vetto {mode}") / ms(crun):.2f}')
PY

echo "== vetto supervisor peak RSS (/usr/bin/time -v, target <= 8 MiB)"
/usr/bin/time -v $VRUN 2>&1 >/dev/null | awk -F: '/Maximum resident/ {printf "root:     %d KiB\n", $2}'
$AS_NOBODY /usr/bin/time -v $VRUN 2>&1 >/dev/null | awk -F: '/Maximum resident/ {printf "rootless: %d KiB\n", $2}'
echo "== vetto phase timings (-v, rootless, one run)"
$AS_NOBODY NO_COLOR=1 RUST_LOG=vetto=info $VRUN 2>&1 >/dev/null | grep -oE 'phase="?[a-z]+"? ms="?[0-9.]+"?' || true
