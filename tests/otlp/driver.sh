#!/usr/bin/env bash
# The scenario of tests/otlp/run.sh with the exporter driven by the small Rust driver
# broker/examples/otlp_driver.rs (the real store and exporter, no vetto CLI): the receiver
# down for the first half of the run, then up; every record received exactly once.
#
# usage: tests/otlp/driver.sh [path/to/otlp_driver]
#        (default: $CARGO_TARGET_DIR or target, /debug/examples/otlp_driver; built by
#        `cargo test -p vetto-broker` or `cargo build -p vetto-broker --example otlp_driver`)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../../target}
DRIVER=$(realpath "${1:-$target/debug/examples/otlp_driver}")
[ -x "$DRIVER" ] || { echo "driver.sh: no driver at $DRIVER (cargo build -p vetto-broker --example otlp_driver)" >&2; exit 2; }
PY=$("$here/setup.sh" | tail -1) || exit 1

WORK=$(mktemp -d /tmp/vetto-otlp-driver.XXXXXX)
STORE=$WORK/state/vetto/audit
# shellcheck source=scenario.sh
. "$here/scenario.sh"
trap 'stop_receiver' EXIT

do_session() { "$DRIVER" session "$STORE" "$1" "$URL"; }
do_export() { "$DRIVER" export "$STORE" "$URL"; }
do_query() { "$DRIVER" query "$STORE"; }

otlp_scenario
otlp_summary
if [ "$fail" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; exit 1; fi
