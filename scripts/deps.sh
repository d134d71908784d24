#!/usr/bin/env bash
# System packages vetto's tests and benchmarks need, from Debian's archive.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/deps.sh: run as root (it calls apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# python3-venv: tests/otlp/setup.sh makes the OTLP receiver's venv (opentelemetry-proto from
# PyPI; the venv's own pip comes from ensurepip, so python3-pip is not needed).
apt-get install -y -q --no-install-recommends \
  build-essential pkg-config ca-certificates git util-linux procps iproute2 \
  python3 python3-venv \
  hyperfine bubblewrap crun time tmux curl openssh-server openssh-client socat strace \
  linux-perf
# vetto-shim's end-to-end tests drive the real container clients (tests/oci/e2e.sh); gcc
# (build-essential) builds their static probe.
apt-get install -y -q podman containerd docker.io runc busybox-static uidmap
# The OCI runtime-tools validation suite (tests/conformance) and crictl (tests/cri) are built
# with Debian's Go from fetched sources with their vendored dependencies; the systemd + cgroup
# v2 test host (tests/systemd-host) is made with debootstrap.
apt-get install -y -q --no-install-recommends golang-go debootstrap systemd-container \
  containernetworking-plugins
# The Debian package's test (tests/deb) finds the installed man pages with man-db; its
# AppArmor profile check runs AppArmor 4's parser in a Debian 13 chroot (debootstrap, above).
apt-get install -y -q --no-install-recommends man-db
# The Dev Containers CLI brings devcontainer/devcontainer.json up in the e2e tests.
command -v npm >/dev/null || apt-get install -y -q nodejs npm
command -v devcontainer >/dev/null || npm install -g --no-fund --no-audit @devcontainers/cli@0.72.0
