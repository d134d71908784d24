#!/usr/bin/env bash
# Start-up cost of a sandboxed /bin/true: vetto against bubblewrap and crun, root and
# rootless, in rounds of hyperfine runs, reported as medians and ratios to bwrap (within each
# round, then the median over the rounds). Then vetto's peak RSS, and the rest below.
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
# nobody's XDG_RUNTIME_DIR on a tmpfs, as a login session's /run/user/UID is (a disk file
# system there costs vetto milliseconds per start in inode allocation and would not be what
# users run with).
rundir=$(mktemp -d /dev/shm/vetto-bench-run.XXXXXX 2>/dev/null || mktemp -d /tmp/vetto-bench-run.XXXXXX)
# A benchmark that fails part-way (set -e) leaves no server or relay running: each background
# job is stopped with its children (socat runs under /usr/bin/time).
trap 'for j in $(jobs -p); do pkill -P "$j" 2>/dev/null; kill "$j" 2>/dev/null; done; rm -rf "$work" "$rundir"' EXIT
chmod 755 "$work"
mkdir -p "$work/bin" "$work/proj" "$work/home" "$work/crun/rootfs" "$work/crun-state"
cp "$VETTO" "$work/bin/vetto"
chmod 755 "$work/bin/vetto"
echo "API_KEY=x" > "$work/proj/.env"
chown -R 65534:65534 "$work/proj" "$work/home" "$rundir" "$work/crun" "$work/crun-state"
chmod 700 "$rundir"

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
# Root's copy is root's: crun as root refuses ("cannot mkdir `proc`: Permission denied") a
# rootfs another user owns, and the rootfs was given to nobody above.
cp -a "$work/crun" "$work/crun-root"
chown -R 0:0 "$work/crun-root"
chown -R 65534:65534 "$work/crun"

AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all env -i HOME=$work/home PATH=/usr/bin:/bin XDG_RUNTIME_DIR=$rundir"
P="$work/proj"
BWRAP="bwrap --ro-bind / / --tmpfs /tmp --bind $P $P --dev /dev --proc /proc --unshare-all --die-with-parent --chdir $P /bin/true"
VRUN="$work/bin/vetto run --no-user-policy -- /bin/true"
VRUN_NOAUDIT="$work/bin/vetto run --no-user-policy --no-audit -- /bin/true"
VRUN_FS="$work/bin/vetto run --no-user-policy --tier fs-only -- /bin/true"
# Review mode: a change set made, the overlay mounted, and (nothing changed) removed again.
VRUN_REVIEW="$work/bin/vetto run -q --no-user-policy --project-access review -- /bin/true"
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
add "vetto root FS-ONLY" $VRUN_FS
add "vetto root review" $VRUN_REVIEW
add "crun root" $CRUN_ROOT bench-root
if [ "${#names[@]}" -gt 0 ] && [ "${names[-1]}" != "crun root" ]; then
  add "v2-view wrapper root" unshare -m sh -c "$V2VIEW && /bin/true"
  add "crun root (v2 view)" unshare -m sh -c "$V2VIEW && exec $CRUN_ROOT bench-root-v2"
fi
add "setpriv true" $AS_NOBODY /bin/true
add "bwrap rootless" $AS_NOBODY $BWRAP
add "vetto rootless" $AS_NOBODY $VRUN
add "vetto rootless (no audit)" $AS_NOBODY $VRUN_NOAUDIT
add "vetto rootless FS-ONLY" $AS_NOBODY $VRUN_FS
add "vetto rootless review" $AS_NOBODY $VRUN_REVIEW
add "crun rootless" $AS_NOBODY $CRUN bench-rl
if [ "${names[-1]}" != "crun rootless" ]; then
  add "v2-view wrapper rootless" $AS_NOBODY unshare -Urm sh -c "$V2VIEW && /bin/true"
  add "crun rootless (v2 view)" $AS_NOBODY unshare -Urm sh -c "$V2VIEW && exec $CRUN bench-rl-v2"
fi

# The code layout (shim/build.rs): how much of shim/layout/vetto.order names functions this
# binary has. A list made for another toolchain or Cargo.lock matches little, and start-up
# pays for it in page faults: `make layout` makes it anew.
order="$HERE/../shim/layout/vetto.order"
if [ -f "$order" ]; then
  listed=$(grep -vc '^#' "$order" || true)
  present=$(comm -12 <(grep -v '^#' "$order" | sort -u) <(nm --defined-only "$VETTO" 2>/dev/null | awk '{print $3}' | sort -u) | wc -l)
  echo "== code layout: $present of $listed functions of shim/layout/vetto.order are in this binary (target: all; else make layout)"
fi

# In rounds: each round runs every command ($ROUND_RUNS runs each, one command after the
# other, as hyperfine does), and the ratios to bwrap are taken within a round, so that a drift
# of the machine's speed over the minutes the bench takes (bwrap root went 4.3 -> 6.1 ms between
# runs here) lands on both sides of a ratio instead of on one.
ROUNDS=${BENCH_ROUNDS:-5}
ROUND_RUNS=$(( (RUNS + ROUNDS - 1) / ROUNDS ))
echo "== hyperfine, $ROUNDS rounds of $ROUND_RUNS runs of each command ($((ROUNDS * ROUND_RUNS)) runs each)"
args=()
for i in "${!names[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
for round in $(seq "$ROUNDS"); do
  hyperfine --shell=bash --warmup 2 --runs "$ROUND_RUNS" --export-json "$work/h.$round.json" "${args[@]}" \
    >"$work/hyperfine.log" 2>&1 || true
  # hyperfine stops at the first run that fails, and the benchmarks after it are not run: say
  # which, and run that command again until it fails, to show its error.
  if grep -q '^Error' "$work/hyperfine.log"; then
    n=$(grep -oE '^Benchmark [0-9]+' "$work/hyperfine.log" | tail -1 | grep -oE '[0-9]+')
    echo "bench: in round $round, hyperfine stopped at '${names[$((n - 1))]}': $(grep -m1 '^Error' "$work/hyperfine.log")"
    for _ in $(seq 300); do
      if ! bash -c "${cmds[$((n - 1))]}" >/dev/null 2>"$work/failed.err"; then
        echo "bench: one of its runs failed with: $(head -c 800 "$work/failed.err")"
        break
      fi
    done
    rm -f "$work/h.$round.json"
    break
  fi
done

python3 - "$work" "$ROUNDS" <<'PY'
import json, os, statistics as st, sys
work, rounds = sys.argv[1], int(sys.argv[2])
runs = []  # one dict per round: command -> its times (s)
for i in range(1, rounds + 1):
    f = os.path.join(work, f"h.{i}.json")
    if os.path.exists(f):
        runs.append({x["command"]: x["times"] for x in json.load(open(f))["results"]})
if not runs:
    sys.exit("bench: no complete hyperfine round")
names = list(runs[0])
allt = {n: [t for r in runs for t in r.get(n, [])] for n in names}
med = lambda ts: st.median(ts) * 1e3 if ts else float("nan")
ms = lambda n: med(allt.get(n, []))
def per_round(f, *ns):
    """f of the commands' medians, in each round that ran them all."""
    return [f(*(med(r[n]) for n in ns)) for r in runs if all(r.get(n) for n in ns)]
def ratios(a, b):
    """a / b within each round, and the median of those."""
    rs = per_round(lambda x, y: x / y, a, b)
    return rs, (st.median(rs) if rs else float("nan"))
print(f"(ms: the median of all runs; a ratio: the median over the {len(runs)} rounds of the ratio within each round, with the rounds' lowest and highest)")
print(f'{"command":<26}{"median ms":>10}{"sd ms":>8}{"x bwrap (same mode)":>22}{"rounds":>14}   (target for vetto: <= 1.5x)')
for n in names:
    mode = "rootless" if "rootless" in n else "root"  # "vetto root FS-ONLY" is root
    base = f"bwrap {mode}"
    ratio, spread = "", ""
    if n.split()[0] in ("vetto", "crun", "bwrap") and base in allt:
        rs, m = ratios(n, base)
        ratio = f"{m:.2f}"
        spread = f"{min(rs):.2f}-{max(rs):.2f}" if rs else ""
    sd = st.stdev(allt[n]) * 1e3 if len(allt[n]) > 1 else 0.0
    print(f'{n:<26}{ms(n):>10.2f}{sd:>8.2f}{ratio:>22}{spread:>14}')
def diff(a, b):
    ds = per_round(lambda x, y: x - y, a, b)
    return st.median(ds) if ds else float("nan"), ds
for mode in ("root", "rootless"):
    on, off = f"vetto {mode}", f"vetto {mode} (no audit)"
    if on in allt and off in allt:
        d, ds = diff(on, off)
        print(f'audit on/off, {mode}: {d:+.2f} ms (rounds {min(ds):+.2f} to {max(ds):+.2f}; goal <= 0.5 ms)')
for mode in ("root", "rootless"):
    on, w = f"vetto {mode} review", f"vetto {mode}"
    if on in allt and w in allt:
        d, ds = diff(on, w)
        print(f'review mode vs write, {mode}: {d:+.2f} ms (rounds {min(ds):+.2f} to {max(ds):+.2f}; goal <= +1 ms)')
for mode in ("root", "rootless"):
    crun = next((n for n in (f"crun {mode}", f"crun {mode} (v2 view)") if n in allt), None)
    if f"vetto {mode}" in allt and crun:
        rs, m = ratios(f"vetto {mode}", crun)
        if rs:
            print(f'vetto {mode} / {crun} = {m:.2f} (rounds {min(rs):.2f}-{max(rs):.2f})')
    # The wrapper's own cost taken out: crun alone is (wrapper + crun) - (wrapper + /bin/true)
    # + /bin/true, where /bin/true is run as the wrapper runs it (by setpriv, rootless).
    wrap, alone = f"v2-view wrapper {mode}", ("setpriv true" if mode == "rootless" else "true")
    if crun == f"crun {mode} (v2 view)" and all(n in allt for n in (wrap, alone, f"vetto {mode}")):
        rs = per_round(lambda v, c, w, t: v / (c - w + t), f"vetto {mode}", crun, wrap, alone)
        if rs:
            print(f'vetto {mode} / crun {mode} with the wrapper taken out = {st.median(rs):.2f} '
                  f'(rounds {min(rs):.2f}-{max(rs):.2f}; target <= 1.0)')
PY

# vetto's own pid is the front (shim/src/front.rs), which exits with the status while the
# supervisor (its child) finishes: /usr/bin/time would see the front's RSS, not the
# supervisor's. The supervisor logs its own peak (VmHWM) at -v, just before the status.
echo "== vetto supervisor peak RSS (its VmHWM at the session's end, target <= 8 MiB)"
NO_COLOR=1 RUST_LOG=vetto=info $VRUN 2>&1 >/dev/null | grep -oE 'peak_rss_kib=[0-9]+' | sed 's/peak_rss_kib=/root:     /; s/$/ KiB/'
$AS_NOBODY NO_COLOR=1 RUST_LOG=vetto=info $VRUN 2>&1 >/dev/null | grep -oE 'peak_rss_kib=[0-9]+' | sed 's/peak_rss_kib=/rootless: /; s/$/ KiB/'
# Most of that is the binary's own text, clean page-cache pages shared by every vetto process
# (RssFile); what a session costs in memory of its own is RssAnon.
echo "   of which, mid-session (/proc/PID/status of the supervisor, and of the front, root):"
$work/bin/vetto run --no-user-policy -- /bin/sleep 0.5 & vp=$!
sleep 0.3
sp=$(pgrep -P $vp -x vetto | head -1)
grep -E '^(VmHWM|RssAnon|RssFile):' /proc/$sp/status | tr -s ' \t' ' ' | sed 's/^/   supervisor /'
grep -E '^(RssAnon|RssFile):' /proc/$vp/status | tr -s ' \t' ' ' | sed 's/^/   front /'
wait $vp || true
echo "== vetto phase timings (-v, rootless, one run)"
$AS_NOBODY NO_COLOR=1 RUST_LOG=vetto=info $VRUN 2>&1 >/dev/null | grep -oE 'phase="?[a-z ]+"? ms="?[0-9.]+"?' || true
echo "== vetto phase timings (-v, rootless FS-ONLY, one run)"
$AS_NOBODY NO_COLOR=1 RUST_LOG=vetto=info $work/bin/vetto run --tier fs-only --no-user-policy -- /bin/true 2>&1 >/dev/null | grep -oE 'phase="?[a-z ]+"? ms="?[0-9.]+"?' || true

echo
echo "== from the command's exit to the runner's exit (median of 20; target for vetto <= 1 ms)"
EX="python3 $HERE/bench_exit.py 20"
BW_EXIT="bwrap --ro-bind / / --tmpfs /tmp --bind $P $P --dev /dev --proc /proc --unshare-all --die-with-parent --chdir $P"
for mode in root rootless; do
  pre=""; [ "$mode" = rootless ] && pre="$AS_NOBODY"
  printf '%-9s bwrap %s ms, vetto FULL %s ms, vetto FS-ONLY %s ms\n' "$mode" \
    "$($pre $EX $BW_EXIT 2>&1)" \
    "$($pre $EX $work/bin/vetto run -q --tier full --no-user-policy -- 2>&1)" \
    "$($pre $EX $work/bin/vetto run -q --tier fs-only --no-user-policy -- 2>&1)"
done

echo
echo "== policy + bundle on a project of 10,000 files in 200 directories (default profile, secret scan included, listing cache warm; median of 10; target <= 1 ms)"
BIG="$work/big"
python3 - "$BIG" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(100):
    sub = os.path.join(root, f"pkg{d:03}", "src")
    os.makedirs(sub, exist_ok=True)
    for f in range(100):
        open(os.path.join(sub, f"f{f:03}.rs"), "w").close()
open(os.path.join(root, "pkg007", ".env"), "w").write("K=1\n")
PY
chown -R 65534:65534 "$BIG"
# The walk's listing cache keeps only directories whose ctime is 2 s old (crate listing):
# measured as a developer meets it, on a tree not changed in the last seconds, after one run.
sleep 2.5
(cd "$BIG" && "$work/bin/vetto" run -q --tier full --no-user-policy -- /bin/true)
for tier in full fs-only; do
  for _ in $(seq 10); do
    (cd "$BIG" && NO_COLOR=1 RUST_LOG=vetto=info "$work/bin/vetto" run --tier "$tier" --no-user-policy -- /bin/true 2>&1 >/dev/null) \
      | grep -oE 'phase="?(policy|bundle|view)"? ms="?[0-9.]+"?' | grep -oE '[0-9.]+"?$' | tr -d '"' | awk '{s+=$1} END {if (NR) print s}'
  done | sort -n | awk -v t="$tier" '{a[NR]=$1} END {printf "%-8s policy+%s: median %.2f ms (min %.2f, max %.2f)\n", t, (t=="full"?"bundle":"view"), a[int((NR+1)/2)], a[1], a[NR]}'
done

# Counted, not timed: on a small shared machine the timings above swing by a millisecond from
# run to run, while a count of the supervisor's own system calls (not its children's) moves
# only when the code does.
echo "== vetto supervisor system calls (strace of the supervisor alone, root, FULL, one run each)"
# The supervisor is the front's first child (shim/src/front.rs): `strace -ff` writes a file per
# process; the front's is the one that starts with its execve, and its first clone names the
# supervisor. (`strace -c` of the command counted the front alone.)
for where in "$P" "$BIG"; do
  rm -f "$work"/stf.*
  if (cd "$where" && strace -ff -o "$work/stf" "$work/bin/vetto" run -q --tier full --no-user-policy -- /bin/true); then
    front=$(grep -l -m1 '^execve(' "$work"/stf.* | head -1)
    sup=$(grep -m1 -oE '^clone.*= [0-9]+$' "$front" | grep -oE '[0-9]+$')
    printf '%-40s %s calls\n' "$where" "$(grep -cvE '^(\+\+\+|---) ' "$work/stf.$sup")"
  else
    echo "strace failed in $where"
  fi
done

echo
echo "== review mode: vetto changes apply of 10,000 changed files (the tree above; one run, root)"
# The sandbox writes as its caller, mapped alone into its user namespace: root's sandbox cannot
# write files owned by nobody (an unmapped owner), so the tree becomes root's own first.
chown -R 0:0 "$BIG"
id=$(cd "$BIG" && "$work/bin/vetto" run --no-user-policy --project-access review -- python3 -c '
import os
for d, _, fs in os.walk("."):
    for f in fs:
        if f.endswith(".rs"):
            open(os.path.join(d, f), "a").write("x\n")
' 2>&1 | grep -oE 'changes apply [0-9a-f-]+' | head -1 | cut -d' ' -f3 || true)
if [ -n "$id" ]; then
  s=$(date +%s%N)
  "$work/bin/vetto" changes apply "$id" | tail -1
  e=$(date +%s%N)
  echo "apply: $(( (e - s) / 1000000 )) ms"
else
  echo "apply: the review session made no change set"
fi

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
# Five interleaved rounds of the same transfer: direct, through the broker, through socat as a
# plain relay (the same loopback path). On 2 cores a relay competes with client and server for
# CPU, and "direct" itself swings between runs: the relays' CPU time per GiB relayed (user +
# system) is the figure that depends least on it. The broker's comes from its wait4 when the
# session stops it; socat's from /usr/bin/time around a socat that relays this one connection
# and exits. Their ratio, measured in the same round, is the comparison that survives the
# machine's changing speed (the same broker measured 180 ms/GiB at one stop and 350 at another).
SPORT=$((NPORT + 1))
echo "round  direct MB/s  broker MB/s  socat MB/s  broker/direct  broker/socat  CPU ms/GiB: broker  socat  broker/socat"
for round in 1 2 3 4 5; do
  d=$(python3 "$P/bench_net.py" bulk direct 127.0.0.2 "$NPORT" "$BYTES")
  b=$(NO_COLOR=1 RUST_LOG=vetto=info $NET python3 bench_net.py bulk 127.0.0.1:3128 127.0.0.2 "$NPORT" "$BYTES" 2>"$work/broker.err")
  cpu=$(grep -oE 'user_ms="[0-9.]+" sys_ms="[0-9.]+"' "$work/broker.err" | grep -oE '[0-9.]+' | awk '{s+=$1} END {if (NR) print s}')
  /usr/bin/time -f "%U %S" -o "$work/socat.time" socat TCP-LISTEN:$SPORT,bind=127.0.0.1,reuseaddr TCP:127.0.0.2:$NPORT &
  SOCAT=$!
  for _ in $(seq 50); do ss -Htln "sport = :$SPORT" | grep -q . && break; sleep 0.02; done
  s=$(python3 "$P/bench_net.py" bulk direct 127.0.0.1 "$SPORT" "$BYTES")
  wait "$SOCAT" || true
  scpu=$(awk '{print ($1 + $2) * 1000}' "$work/socat.time" 2>/dev/null)
  python3 -c "import sys; r,d,b,s,c,sc=sys.argv[1:]; d,b,s,c,sc=map(float,(d,b,s,c or 'nan',sc or 'nan')); g=(1<<30)/$BYTES; print(f'{r:>5}  {d:>11.0f}  {b:>11.0f}  {s:>10.0f}  {b/d:>13.2f}  {b/s:>12.2f}  {c*g:>18.0f}  {sc*g:>5.0f}  {c/sc:>12.2f}')" "$round" "$d" "$b" "$s" "$cpu" "$scpu"
  echo "$d $b $s ${cpu:-nan} ${scpu:-nan}" >> "$work/rounds"
done
python3 - "$work/rounds" "$BYTES" <<'PY'
import sys, statistics
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
g = (1 << 30) / float(sys.argv[2])
print(f"targets: broker ahead of socat in every round: {all(b > s for _, b, s, _, _ in rows)}; "
      f">= 0.5x direct in every round: {all(b >= 0.5 * d for d, b, _, _, _ in rows)}; "
      f"broker CPU per GiB median {statistics.median(c for *_, c, _ in rows) * g:.0f} ms (target <= 137: half of the 275 first measured);"
      f" socat's median {statistics.median(sc for *_, sc in rows) * g:.0f} ms; broker/socat CPU median {statistics.median(c / sc for *_, c, sc in rows):.2f}")
PY
direct_bulk=$(awk '{print $1}' "$work/rounds" | sort -n | sed -n 3p)
broker_bulk=$(awk '{print $2}' "$work/rounds" | sort -n | sed -n 3p)
read -r d50 d90 < <(python3 "$P/bench_net.py" conns direct 127.0.0.2 "$NPORT" 1000)
read -r b50 b90 < <($NET python3 bench_net.py conns 127.0.0.1:3128 127.0.0.2 "$NPORT" 1000)
python3 - "$direct_bulk" "$broker_bulk" "$d50" "$b50" "$d90" "$b90" <<'PY'
import sys
db, bb, d50, b50, d90, b90 = map(float, sys.argv[1:])
print(f"1 GiB transfer, medians of the rounds: direct {db:.0f} MB/s, through the broker {bb:.0f} MB/s = {bb / db:.2f}x direct")
print(f"1000 sequential connections, connect+first byte: direct p50 {d50:.3f} ms, broker p50 {b50:.3f} ms,"
      f" added p50 {b50 - d50:.3f} ms (target <= 0.3 ms); p90 {d90:.3f} / {b90:.3f} ms")
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
echo "== 50 concurrent vetto run sessions (root, FULL, /bin/true): total and per-session wall time; leaks afterwards"
python3 - "$work/bin/vetto" <<'PY'
import subprocess, sys, time, statistics
from concurrent.futures import ThreadPoolExecutor
vetto = sys.argv[1]
def one(_):
    t = time.perf_counter()
    p = subprocess.run([vetto, "run", "-q", "--no-user-policy", "--", "/bin/true"], capture_output=True)
    return (time.perf_counter() - t) * 1e3, p.returncode
t0 = time.perf_counter()
with ThreadPoolExecutor(50) as ex:
    res = list(ex.map(one, range(50)))
total = (time.perf_counter() - t0) * 1e3
lat = sorted(r for r, _ in res)
fails = sum(1 for _, rc in res if rc != 0)
print(f"total {total:.0f} ms for 50; per session p50 {statistics.median(lat):.1f} ms, max {lat[-1]:.1f} ms; failed {fails}")
PY
sleep 0.5
left_procs=$(pgrep -fc "$work/bin/vetto" || true)
left_mounts=$(grep -c "vetto" /proc/self/mountinfo || true)
rt=/dev/shm/vetto-0/sessions; [ -d "$rt" ] || rt=/tmp/vetto-0/sessions
left_sessions=$(find "$rt" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
echo "left behind: $left_procs processes, $left_mounts vetto mounts, $left_sessions session entries in $rt"

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
