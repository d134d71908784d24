#!/usr/bin/env bash
# What can be checked of the OTLP export without the vetto CLI:
#   1. the receiver itself (tests/otlp/receiver_check.py): it takes a request made by vetto's
#      encoder (written by the unit test sample_request_for_the_receiver) as JSON and as
#      protobuf, and refuses each of 30 malformed variants, saying why;
#   2. the exporter against it (tests/otlp/driver.sh): the scenario of tests/otlp/run.sh
#      through the Rust driver broker/examples/otlp_driver.rs.
#
# usage: tests/otlp/check.sh      (builds with cargo; CARGO_TARGET_DIR is honoured)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
PY=$("$here/setup.sh" | tail -1) || exit 1
WORK=$(mktemp -d /tmp/vetto-otlp-check.XXXXXX)
RECEIVER_PID=
trap '[ -n "$RECEIVER_PID" ] && kill "$RECEIVER_PID" 2>/dev/null' EXIT

(cd "$root" && VETTO_OTLP_SAMPLE=$WORK/sample.json cargo test -q -p vetto-broker --lib \
  audit::otlp::tests::sample_request_for_the_receiver >"$WORK/cargo.log" 2>&1 &&
  cargo build -q -p vetto-broker --example otlp_driver >>"$WORK/cargo.log" 2>&1) ||
  { cat "$WORK/cargo.log"; echo "check.sh: cargo failed" >&2; exit 1; }

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PY" "$here/receiver.py" "$PORT" "$WORK/received.jsonl" >"$WORK/receiver.out" 2>"$WORK/receiver.err" &
RECEIVER_PID=$!
for _ in $(seq 100); do grep -q listening "$WORK/receiver.out" 2>/dev/null && break; sleep 0.1; done
if "$PY" "$here/receiver_check.py" "$WORK/sample.json" "$PORT" "$WORK/received.jsonl"; then
  echo "test otlp::receiver_takes_the_encoder_s_request_and_refuses_malformed_ones ... ok"
  rc=0
else
  echo "test otlp::receiver_takes_the_encoder_s_request_and_refuses_malformed_ones ... FAILED"
  tail -40 "$WORK/receiver.err"
  rc=1
fi
kill "$RECEIVER_PID" 2>/dev/null
wait "$RECEIVER_PID" 2>/dev/null
RECEIVER_PID=

bash "$here/driver.sh" "$target/debug/examples/otlp_driver" || rc=1
[ "$rc" -eq 0 ] && rm -rf "$WORK"
exit "$rc"
