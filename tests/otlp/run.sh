#!/usr/bin/env bash
# The OTLP export end to end with the vetto CLI against a real OTLP receiver on loopback
# (tests/otlp/receiver.py, on the official OTLP protobuf definitions): the receiver down for the
# first half of the run, then up; every record of the store received exactly once.
#
# usage: tests/otlp/run.sh path/to/vetto
#
# Uses a fresh XDG_STATE_HOME (so a fresh store), `vetto run --audit-otlp URL -- /bin/true`,
# `vetto audit export --otlp URL` and `vetto audit query --json`. Needs python3 with venv
# (scripts/deps.sh) and PyPI for tests/otlp/setup.sh on its first run.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: $0 path/to/vetto" >&2; exit 2; }
VETTO=$(realpath "$1")
[ -x "$VETTO" ] || { echo "run.sh: $1 is not an executable" >&2; exit 2; }
PY=$("$here/setup.sh" | tail -1) || exit 1

WORK=$(mktemp -d /tmp/vetto-otlp.XXXXXX)
export XDG_STATE_HOME=$WORK/state
mkdir -p "$XDG_STATE_HOME" "$WORK/project"
# shellcheck source=scenario.sh
. "$here/scenario.sh"
trap 'stop_receiver' EXIT

do_session() { (cd "$WORK/project" && "$VETTO" run --audit-otlp "$URL" -- /bin/true); }
do_export() { "$VETTO" audit export --otlp "$URL"; }
do_query() { "$VETTO" audit query --json; }

otlp_scenario
otlp_summary
if [ "$fail" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; exit 1; fi
