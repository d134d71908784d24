# The OTLP scenario of the issue, sourced by tests/otlp/run.sh (the vetto CLI) and
# tests/otlp/driver.sh (the exporter through a small Rust driver): the receiver down for the
# first half of the run, then up; nothing lost, nothing duplicated.
#
# The caller sets WORK (a fresh temporary directory) and PY (the venv's python, from
# setup.sh), and defines, all three using $URL:
#   do_session NAME   one session exporting to $URL (like `vetto run --audit-otlp $URL -- /bin/true`)
#   do_export         send what is pending (like `vetto audit export --otlp $URL`)
#   do_query          every record of the store, one JSON object per line with its `seq`
# then calls otlp_scenario, which prints cargo-like lines and returns non-zero on a failure.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pass=0
fail=0
RECEIVER_PID=

ok() { pass=$((pass + 1)); echo "test otlp::$1 ... ok"; }
bad() {
  fail=$((fail + 1)); echo "test otlp::$1 ... FAILED"
  shift
  [ $# -gt 0 ] && printf '    %s\n' "$@"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_receiver() {
  "$PY" "$here/receiver.py" "$PORT" "$WORK/received.jsonl" --fail-first 2 \
    >"$WORK/receiver.out" 2>>"$WORK/receiver.err" &
  RECEIVER_PID=$!
  for _ in $(seq 100); do
    grep -q listening "$WORK/receiver.out" 2>/dev/null && return 0
    kill -0 "$RECEIVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "the receiver did not start:" >&2
  cat "$WORK/receiver.err" >&2
  return 1
}

stop_receiver() {
  if [ -n "$RECEIVER_PID" ]; then
    kill "$RECEIVER_PID" 2>/dev/null
    wait "$RECEIVER_PID" 2>/dev/null
    RECEIVER_PID=
  fi
}

received() { grep -c '"seq"' "$WORK/received.jsonl" 2>/dev/null || true; }

# timed NAME CMD...: run CMD, fail NAME if it fails or takes 10 s or more.
timed() {
  local name=$1 t0 ms out
  shift
  t0=$(date +%s%N)
  if ! out=$("$@" 2>&1); then
    bad "$name" "failed:" "$out"
    return 1
  fi
  ms=$((($(date +%s%N) - t0) / 1000000))
  if [ "$ms" -ge 10000 ]; then
    bad "$name" "took ${ms} ms (a collector must not block a session)" "$out"
    return 1
  fi
  ok "$name"
}

otlp_scenario() {
  PORT=$(free_port)
  URL=http://127.0.0.1:$PORT/v1/logs
  : >"$WORK/received.jsonl"
  echo "otlp: receiver on $URL, down for now; work in $WORK"

  # The first half: nobody listens. The sessions succeed, their records wait in the store.
  for i in 1 2 3; do
    timed "session_succeeds_with_the_receiver_down_$i" do_session "down-$i"
  done
  local before
  before=$(do_query | grep -c '"seq"')
  if [ "$before" -gt 0 ]; then ok records_wait_in_the_store; else bad records_wait_in_the_store "the store is empty"; fi

  # The second half: the receiver comes up (answering 503 to its first two requests).
  start_receiver || { bad receiver_starts; return 1; }
  for i in 1 2 3; do
    timed "session_succeeds_with_the_receiver_up_$i" do_session "up-$i"
  done
  local now
  now=$(received)
  if [ "$now" -ge "$before" ]; then
    ok later_sessions_send_the_backlog
  else
    bad later_sessions_send_the_backlog "received $now records, the store had $before before the receiver came up"
  fi
  timed export_sends_what_is_pending do_export
  stop_receiver

  do_query >"$WORK/store.jsonl"
  local out
  if out=$("$PY" "$here/compare.py" "$WORK/store.jsonl" "$WORK/received.jsonl" 2>&1); then
    ok every_record_received_exactly_once
  else
    bad every_record_received_exactly_once "$out" "receiver log:" "$(tail -20 "$WORK/receiver.err")"
  fi
  echo "$out" | tail -1
  [ "$fail" -eq 0 ]
}

otlp_summary() {
  if [ "$fail" -eq 0 ]; then
    echo "test result: ok. $pass passed; $fail failed"
  else
    echo "test result: FAILED. $pass passed; $fail failed"
  fi
}
