#!/usr/bin/env bash
# The agents and the toolchains, for real (issue 17):
#   1. the agents' own packages, installed from npm (@anthropic-ai/claude-code, @openai/codex,
#      @google/gemini-cli, opencode-ai) and PyPI (aider-chat) into a cache outside HOME
#      ($VETTO_AGENTS_CACHE, default /var/cache/vetto-agents; installed when absent), run as
#      `vetto run claude ...` with no credentials, as root and as nobody, with an empty HOME:
#      each must get as far as asking for a login or key (not fail on a sandbox denial), with
#      its agent profile named, and find its own installation although nothing added it;
#   2. a real `cargo run` of a crate with a new dependency, an `npm install` and a `pip install`
#      in a venv, through the broker to the package registries, with the cache presets and
#      nothing else in HOME writable: the cache directories fill on the host, nothing else
#      appears in HOME.
# The registries' names resolve on this machine into 203.0.113.0/24, a documentation range the
# broker rightly refuses: the policies of part 2 admit that range with `allow_cidrs`, for these
# tests only. Nothing else is dialled (the agents' API hosts do not resolve here, so each stops
# at its login step). Root only (it runs the rootless cases through setpriv). Ends with a
# `test result:` line for make test's count.
#
# usage: tests/agents/e2e.sh [BIN_DIR]      (default target/debug)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=$(realpath "${1:-$top/target/debug}")
vetto=$bin/vetto
cache=${VETTO_AGENTS_CACHE:-/var/cache/vetto-agents}
pass=0
fail=0
ok() { echo "agents: ok   $1"; pass=$((pass + 1)); }
bad() { echo "agents: FAIL $1"; fail=$((fail + 1)); }
finish() {
  echo "test result: $([ $fail -eq 0 ] && echo ok || echo FAILED). $pass passed; $fail failed (agents and registries)"
  [ $fail -eq 0 ]
  exit $?
}
if [ "$(id -u)" -ne 0 ]; then
  echo "agents: SKIPPED (run as root: it installs into $cache and runs the rootless cases with setpriv)"
  exit 0
fi
[ -x "$vetto" ] || { bad "no vetto binary at $vetto"; finish; }

# --- install ----------------------------------------------------------------------------------
if [ ! -x "$cache/npm/bin/claude" ] || [ ! -x "$cache/npm/bin/codex" ] || [ ! -x "$cache/npm/bin/gemini" ] ||
  [ ! -x "$cache/npm/bin/opencode" ]; then
  echo "agents: installing the agents from npm into $cache/npm"
  mkdir -p "$cache"
  npm install -g --no-audit --no-fund --prefix "$cache/npm" @anthropic-ai/claude-code @openai/codex \
    @google/gemini-cli opencode-ai >"$cache/npm-install.log" 2>&1 ||
    { bad "npm install of the agents (see $cache/npm-install.log)"; finish; }
fi
if [ ! -x "$cache/aider/bin/aider" ]; then
  echo "agents: installing aider-chat from PyPI into $cache/aider"
  rm -rf "$cache/aider"
  # Debian's python3: a venv whose interpreter the sandbox sees (/usr/bin).
  { /usr/bin/python3 -m venv "$cache/aider" && "$cache/aider/bin/pip" install -q aider-chat; } \
    >"$cache/pip-install.log" 2>&1 || { bad "pip install aider-chat (see $cache/pip-install.log)"; finish; }
fi
chmod -R a+rX "$cache"

work=$(mktemp -d /tmp/vetto-agents.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

# A fresh empty HOME and project for USER (root or nobody); prints "HOME PROJ".
world() {
  local who=$1 name=$2
  local w="$work/$who-$name"
  mkdir -p "$w/home" "$w/proj"
  (cd "$w/proj" && git init -q .)
  [ "$who" = nobody ] && chown -R 65534:65534 "$w"
  echo "$w/home $w/proj"
}

# Run as WHO in DIR with HOME: the rest of the arguments.
as() {
  local who=$1 home=$2 dir=$3
  shift 3
  local env=(env -i "HOME=$home" "PATH=$cache/npm/bin:$cache/aider/bin:/usr/local/bin:/usr/bin:/bin"
    "LANG=C.UTF-8" "TERM=dumb")
  if [ "$who" = nobody ]; then
    (cd "$dir" && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "${env[@]}" "$@")
  else
    (cd "$dir" && "${env[@]}" "$@")
  fi
}

# --- 1. the agents ----------------------------------------------------------------------------
denied='Permission denied|Read-only file system|Operation not permitted|cannot execute'
agent() {
  local who=$1 name=$2 want=$3
  shift 3
  read -r home proj < <(world "$who" "$name")
  local out
  out=$(as "$who" "$home" "$proj" timeout 90 "$vetto" run "$@" </dev/null 2>&1)
  if ! grep -q "agent profile $name" <<<"$out"; then
    bad "$who: $name: no agent profile named: $(tail -3 <<<"$out")"
  elif ! grep -qE "$want" <<<"$out"; then
    bad "$who: $name: never asked for a login or key: $(tail -5 <<<"$out")"
  elif grep -qE "$denied" <<<"$out"; then
    bad "$who: $name: a sandbox denial: $(grep -E "$denied" <<<"$out" | head -3)"
  else
    ok "$who: $name asks for its login ($(grep -oE "$want" <<<"$out" | head -1))"
  fi
}
for who in root nobody; do
  agent "$who" claude 'Not logged in' claude -p hi
  agent "$who" codex 'Not logged in' codex login status
  if [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then
    agent "$who" gemini 'Please set an Auth method' gemini -p hi
  else
    echo "agents: SKIPPED $who: gemini (gemini-cli needs Node 20; this machine has $(node --version 2>/dev/null))"
  fi
  agent "$who" opencode '0 credentials' opencode auth list
  # aider offers an OpenRouter sign-in in the browser and waits: cut short.
  agent "$who" aider 'connect Aider with OpenRouter|no API keys were provided' \
    --wall-clock 20s aider --message hi --no-git --no-check-update
done

# --- 2. the registries ------------------------------------------------------------------------
registries() {
  local who=$1
  read -r home proj < <(world "$who" registries)
  local pol="$work/$who-registries.toml"
  cat >"$pol" <<'EOF'
[network]
mode = "allowlist"
allow = ["@cargo", "@npm", "@pip"]
# This machine resolves the registries into 203.0.113.0/24 (a documentation range), which the
# broker refuses unless listed: for this test only.
allow_cidrs = ["203.0.113.0/24"]
EOF
  chmod 644 "$pol"
  mkdir -p "$proj/src"
  printf '[package]\nname = "t"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "1"\n' >"$proj/Cargo.toml"
  echo 'fn main() { println!("{}", itoa::Buffer::new().format(4242)); }' >"$proj/src/main.rs"
  [ "$who" = nobody ] && chown -R 65534:65534 "$proj"
  local out
  # npm and pip (Debian's node and python3), as root and as nobody.
  out=$(as "$who" "$home" "$proj" timeout 300 "$vetto" run -q --cache npm --cache pip --policy "$pol" -- sh -c \
    'npm install --no-audit --no-fund is-number@7 >/dev/null 2>&1; node -e "console.log(\"npm\", require(\"is-number\")(5))";
     /usr/bin/python3 -m venv .venv && .venv/bin/pip install -q six >/dev/null 2>&1;
     .venv/bin/python -c "import six; print(\"pip\", six.__name__)";
     touch ~/.npm/probe ~/.cache/pip/probe && echo caches-writable' 2>&1)
  if grep -q '^npm true$' <<<"$out" && grep -q '^pip six$' <<<"$out" && grep -q '^caches-writable$' <<<"$out"; then
    ok "$who: npm install and pip install through the broker"
  else
    bad "$who: npm/pip: $(tail -5 <<<"$out")"
  fi
  [ -d "$home/.npm/_cacache" ] && ok "$who: npm's cache filled on the host" || bad "$who: no ~/.npm/_cacache on the host"
  # cargo: rustup's toolchain lives in root's home, so as root only (RUSTUP_HOME shown read-only).
  if [ "$who" = root ] && [ -x /root/.cargo/bin/cargo ]; then
    out=$(cd "$proj" && env -i "HOME=$home" "PATH=/root/.cargo/bin:/usr/bin:/bin" RUSTUP_HOME=/root/.rustup \
      timeout 300 "$vetto" run -q --cache cargo --policy "$pol" --allow-read /root/.rustup \
      --pass-env RUSTUP_HOME -- cargo run -q 2>&1)
    if [ "$(tail -1 <<<"$out")" = 4242 ] && ls "$home"/.cargo/registry/cache/*/itoa-*.crate >/dev/null 2>&1; then
      ok "$who: cargo run with a new dependency through the broker (the crate cached on the host)"
    else
      bad "$who: cargo: $(tail -5 <<<"$out")"
    fi
  fi
  # Nothing but the caches appeared in HOME (and vetto's own audit store, which vetto, not the
  # sandbox, keeps in ~/.local/state/vetto).
  local extra
  extra=$(cd "$home" && find . -mindepth 1 -maxdepth 3 |
    grep -vE '^\./(\.npm(/.*)?|\.cache|\.cache/pip(/.*)?|\.cargo|\.cargo/(registry|git|\.package-cache|\.package-cache-mutate|\.global-cache)(/.*)?|\.local|\.local/state|\.local/state/vetto)$' || true)
  [ -z "$extra" ] && ok "$who: nothing else written in HOME" || bad "$who: HOME gained: $extra"
}
registries root
registries nobody

finish
