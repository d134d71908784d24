#!/usr/bin/env bash
# vetto-shim on a systemd + unified cgroup v2 host (issue 14): boots the disposable test host
# (tests/systemd-host/host.sh; a QEMU VM here, cached between runs), then Docker
# (native.cgroupdriver=systemd), Podman (root and rootless, cgroup_manager=systemd) and
# containerd (ctr --runc-systemd-cgroup) run their containers with vetto-shim as the runtime:
# --memory is OOM-killed, --pids-limit stops a fork loop, docker update and docker stats work.
# Always powers the host off. Part of `make test`.
set -euo pipefail
SHIM=$(realpath "${1:?usage: e2e.sh PATH/TO/vetto-shim}")
HERE=$(cd "$(dirname "$0")" && pwd)
H="$HERE/host.sh"
trap 'bash "$H" stop >/dev/null 2>&1 || true' EXIT
bash "$H" build
bash "$H" boot
set +e
out=$(bash "$H" prove "$SHIM" 2>&1)
rc=$?
set -e
printf '%s\n' "$out"
pass=$(printf '%s\n' "$out" | grep -c '^PASS ' || true)
fail=$(printf '%s\n' "$out" | grep -c '^FAIL ' || true)
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
# The line `make test` counts.
if [ "$fail" -eq 0 ]; then
  echo "test result: ok. $pass passed; 0 failed (systemd-host e2e)"
else
  echo "test result: FAILED. $pass passed; $fail failed (systemd-host e2e)"
fi
[ "$fail" -eq 0 ]
