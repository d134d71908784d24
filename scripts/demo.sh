#!/usr/bin/env bash
# Sandbox a real command with the default policy, in a throwaway project that has a .env,
# next to a HOME with an ~/.ssh key, and show what the sandboxed process can and cannot do.
set -uo pipefail
VETTO=$(realpath "${1:-target/release/vetto}")
work=$(mktemp -d /tmp/vetto-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/home/.ssh" "$work/project"
echo "-----BEGIN OPENSSH PRIVATE KEY----- demo" > "$work/home/.ssh/id_ed25519"
echo "API_KEY=sk-demo-secret" > "$work/project/.env"
echo 'print("hello from the project")' > "$work/project/main.py"
cd "$work/project"
export HOME="$work/home" GH_TOKEN=ghp_demo_token

echo "== vetto doctor"
"$VETTO" doctor --no-selftest
echo
echo "== vetto run -- bash -c '...'   (default policy: project writable, secrets masked, network off)"
"$VETTO" run -- bash -c '
  echo "whoami:          $(id -un 2>/dev/null || id -u) (uid $(id -u))"
  echo "cwd:             $PWD"
  echo ".env reads:      \"$(cat .env)\""
  echo "~/.ssh lists:    $(ls -A ~/.ssh 2>&1 | head -1)"
  echo "GH_TOKEN:        \"${GH_TOKEN:-}\""
  echo "write project:   $(echo ok > out.txt && cat out.txt)"
  echo "write /etc:      $(touch /etc/vetto-demo 2>&1 || true)"
  echo "processes:       $(ls /proc | grep -c "^[0-9]") visible"
  echo "network:         $(bash -c "exec 3<>/dev/tcp/127.0.0.1/22" 2>&1 | head -1)"
  echo "capabilities:    $(grep CapEff /proc/self/status)"
'
echo "exit status: $?"
echo
echo "== the audit trail (outside the sandbox: $HOME/.local/state/vetto/audit)"
"$VETTO" run --summary --net allow:example.com -- sh -c 'curl -s -m 5 https://not-allowed.example/ >/dev/null; true' || true
"$VETTO" audit sessions
"$VETTO" audit verify
