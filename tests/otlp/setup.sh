#!/usr/bin/env bash
# Makes (once) the Python venv that tests/otlp/receiver.py runs in, with the official OTLP
# protobuf definitions from PyPI (opentelemetry-proto, and the protobuf runtime it needs).
#
# usage: tests/otlp/setup.sh      (idempotent; prints the venv's python on its last line)
#
# The venv is $VETTO_OTLP_VENV, or $HOME/.cache/vetto-otlp-venv, made with $VETTO_OTLP_PYTHON
# or /usr/bin/python3: python3 and python3-venv, which scripts/deps.sh installs.
set -euo pipefail

VENV=${VETTO_OTLP_VENV:-$HOME/.cache/vetto-otlp-venv}
# Debian's python3 (with python3-venv) unless told otherwise: a python3 earlier on PATH (pyenv,
# say) may lack venv or ensurepip.
PYTHON=${VETTO_OTLP_PYTHON:-$(command -v /usr/bin/python3 || command -v python3 || true)}
# Pinned, so every machine checks against the same definitions.
PACKAGES=(opentelemetry-proto==1.45.2 protobuf==7.36.2)
MARK=$VENV/.vetto-otlp-packages

ready() {
  [ -x "$VENV/bin/python" ] && [ -f "$MARK" ] && [ "$(cat "$MARK")" = "${PACKAGES[*]}" ] &&
    "$VENV/bin/python" -c 'from opentelemetry.proto.collector.logs.v1 import logs_service_pb2; from google.protobuf import json_format' 2>/dev/null
}

if ! ready; then
  [ -n "$PYTHON" ] || { echo "setup.sh: python3 is missing (scripts/deps.sh)" >&2; exit 1; }
  if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
    echo "setup.sh: $VENV exists and is not a venv: not touching it" >&2
    exit 1
  fi
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV" || { echo "setup.sh: python3 -m venv failed (is python3-venv installed? scripts/deps.sh)" >&2; exit 1; }
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PACKAGES[@]}" >&2
  echo "${PACKAGES[*]}" >"$MARK"
  ready || { echo "setup.sh: the venv at $VENV does not import the OTLP definitions" >&2; exit 1; }
fi
echo "$VENV/bin/python"
