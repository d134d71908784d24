#!/usr/bin/env bash
# Makes shim/layout/vetto.order, the code layout of the release binaries (see shim/build.rs):
# the functions real sessions run, found by sampling them with perf, in the order the linker
# is to place them. Run as root (perf -a; the rootless sessions switch to nobody), after
# `make release`; then `make release` again links with the new list. Needs perf (Debian's
# linux-perf).
#
# Sessions profiled: `vetto run -- /bin/true` with the default policy as root and as nobody
# (the start-up users compare), the FS-ONLY tier, and one with the broker (network allowlist;
# the command makes no connection). Samples: CPU time (40 kHz) and every page fault, whose
# address in the binary is the first instruction run on a page.
#
# The order: the functions libcontainer's intermediate and init processes run (each is a
# clone that faults in its code afresh, on the start-up's critical path), those the
# supervisor shares with them first; then the front's and supervisor's own, then what they
# share with the audit writer, then the writer's own, then the broker's; within a group the
# most sampled first.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
VETTO=$(realpath "${1:-$HERE/target/release/vetto}")
OUT=${2:-$HERE/shim/layout/vetto.order}
RUNS=${LAYOUT_RUNS:-150}
command -v perf >/dev/null || { echo "layout: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "layout: run as root" >&2; exit 1; }

work=$(mktemp -d /tmp/vetto-layout.XXXXXX)
rundir=$(mktemp -d /dev/shm/vetto-layout-run.XXXXXX)
trap '[ -n "${LAYOUT_KEEP:-}" ] || rm -rf "$work" "$rundir"' EXIT
chmod 755 "$work"
mkdir -p "$work/bin" "$work/proj" "$work/home"
cp "$VETTO" "$work/bin/vetto"
chmod 755 "$work/bin/vetto"
echo "API_KEY=x" > "$work/proj/.env"
chown -R 65534:65534 "$work/proj" "$work/home" "$rundir"
chmod 700 "$rundir"
export XDG_STATE_HOME="$work/state-root"
AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all env -i HOME=$work/home PATH=/usr/bin:/bin XDG_RUNTIME_DIR=$rundir"
V="$work/bin/vetto run -q --no-user-policy"
cat > "$work/sessions.sh" <<EOF
cd "$work/proj"
for i in \$(seq $RUNS); do
  $V -- /bin/true
  $AS_NOBODY $V -- /bin/true
done
for i in \$(seq \$(( $RUNS / 5 + 1 ))); do
  $V --tier fs-only -- /bin/true
  $V --unattended --net allow:layout.invalid -- /bin/true
done
EOF
# A first session of each kind outside the profile: what only a first run does (a new audit
# store, its key) is not what users wait for.
(cd "$work/proj" && $V -- /bin/true && $AS_NOBODY $V -- /bin/true) >/dev/null 2>&1
perf record -q -a -e cpu-clock/freq=40000/ -e page-faults/period=1/ -o "$work/perf.data" \
  -- bash "$work/sessions.sh" >/dev/null 2>"$work/sessions.err" || { echo "layout: the sessions failed: $(tail -c 600 "$work/sessions.err")" >&2; exit 1; }
perf script --no-demangle -i "$work/perf.data" -F comm,ip,sym,dso 2>/dev/null \
  | awk -v bin="($work/bin/vetto)" '$NF == bin { c = $1; for (i = 2; i < NF - 2; i++) c = c " " $i; print c "\t" $(NF - 1) }' \
  > "$work/samples.tsv"
python3 - "$work/samples.tsv" "$OUT" "$(nm --defined-only "$VETTO" | awk '$2 ~ /[tT]/ {print $3}' | wc -l)" <<'PY'
import collections, sys
samples, out, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
role_of = {"youki:[1:INTER]": "init", "youki:[2:INIT]": "init", "vetto-audit": "audit", "exe": "broker"}
roles = collections.defaultdict(set)
count = collections.Counter()
for line in open(samples):
    comm, sym = line.rstrip("\n").split("\t")
    if sym in ("[unknown]", ""):
        continue
    roles[sym].add(role_of.get(comm, "main"))
    count[sym] += 1
def group(s):
    r = roles[s]
    if "init" in r:
        return 0 if "main" in r else 1
    if "main" in r:
        return 2 if "audit" not in r else 3
    return 4 if "audit" in r else 5
order = sorted(roles, key=lambda s: (group(s), -count[s], s))
with open(out, "w") as f:
    f.write("# vetto's code layout (shim/build.rs), made by scripts/layout.sh; do not edit.\n")
    f.write(f"# {len(order)} functions of {total} in the profiled binary, in the order the linker places them.\n")
    for s in order:
        f.write(s + "\n")
names = ["init+main", "init", "main", "main+audit", "audit", "broker"]
by = collections.Counter(group(s) for s in order)
print("layout: %d functions -> %s (%s)" % (len(order), out, ", ".join(f"{names[g]} {by[g]}" for g in sorted(by))))
PY
