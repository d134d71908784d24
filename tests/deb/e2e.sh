#!/usr/bin/env bash
# The Debian package and the AppArmor profile (issue 16), as a user gets them:
#   1. `make deb`'s script builds the package from the release binaries; its contents and
#      control fields are checked;
#   2. the AppArmor profile is parsed by AppArmor 4's parser (Debian 12 ships 3.0, which
#      predates the `userns` rule): `apparmor_parser -QT` in a Debian 13 chroot made with
#      debootstrap and cached in /var/cache/vetto-apparmor4 (rebuilt when absent); a broken
#      copy must be rejected, so the check can fail. This kernel has no AppArmor, so loading
#      the profile and lifting a real apparmor_restrict_unprivileged_userns=1 cannot be
#      exercised here (see docs/threat-model.md);
#   3. `apt-get install ./vetto_*.deb`, then the installed /usr/bin/vetto: `vetto doctor` as
#      root and as nobody (tier FULL, every self-test check ok), a sandboxed command, the man
#      pages, completions, /etc/vetto/shim.toml.example and /etc/apparmor.d/vetto in place;
#   4. `apt-get purge vetto` leaves none of it behind.
# Root only (it installs a package). Ends with a `test result:` line for make test's count.
#
# usage: tests/deb/e2e.sh [RELEASE_BIN_DIR]      (default target/release, built if missing)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=${1:-$top/target/release}
pass=0
fail=0
ok() { echo "deb: ok   $1"; pass=$((pass + 1)); }
bad() { echo "deb: FAIL $1"; fail=$((fail + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
finish() {
  echo "test result: $([ $fail -eq 0 ] && echo ok || echo FAILED). $pass passed; $fail failed (debian package)"
  [ $fail -eq 0 ]
  exit $?
}
if [ "$(id -u)" -ne 0 ]; then
  echo "deb: SKIPPED (installs a package: run as root)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive

# --- 1. build ---------------------------------------------------------------------------------
if [ ! -x "$bin/vetto" ] || [ ! -x "$bin/vetto-shim" ]; then
  (cd "$top" && cargo build --release -p vetto) || { bad "release build"; finish; }
fi
out=$top/target/deb
rm -rf "$out"
deb=$(bash "$top/packaging/deb/build.sh" "$bin" "$out") || { bad "package build"; finish; }
check "package built: $(basename "$deb")" test -s "$deb"
listing=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for p in ./usr/bin/vetto ./usr/bin/vetto-shim ./usr/share/man/man1/vetto.1.gz \
  ./usr/share/man/man1/vetto-run.1.gz ./usr/share/bash-completion/completions/vetto \
  ./usr/share/zsh/vendor-completions/_vetto ./usr/share/fish/vendor_completions.d/vetto.fish \
  ./etc/apparmor.d/vetto ./etc/vetto/shim.toml.example; do
  check "package holds $p" grep -qxF "$p" <<<"$listing"
done
check "control: package vetto, architecture $(dpkg --print-architecture)" \
  test "$(dpkg-deb -f "$deb" Package Architecture | tr '\n' ' ')" = "Package: vetto Architecture: $(dpkg --print-architecture) "
check "conffiles: the profile and the example" \
  bash -c "dpkg-deb --ctrl-tarfile '$deb' | tar -xOf - ./conffiles | grep -qx /etc/apparmor.d/vetto"

# --- 2. the AppArmor profile under AppArmor 4's parser ---------------------------------------
aa_root=/var/cache/vetto-apparmor4
if ! chroot "$aa_root" apparmor_parser --version >/dev/null 2>&1; then
  echo "deb: making the AppArmor 4 parser's chroot (Debian 13, debootstrap) in $aa_root"
  rm -rf "$aa_root.tmp"
  if debootstrap --variant=minbase --include=apparmor trixie "$aa_root.tmp" http://deb.debian.org/debian >/tmp/vetto-aa-debootstrap.log 2>&1; then
    rm -rf "$aa_root" && mv "$aa_root.tmp" "$aa_root"
  else
    tail -5 /tmp/vetto-aa-debootstrap.log
    bad "AppArmor 4 parser chroot (debootstrap trixie)"
  fi
fi
if chroot "$aa_root" apparmor_parser --version >/dev/null 2>&1; then
  echo "deb: $(chroot "$aa_root" apparmor_parser --version | head -1)"
  install -m 0644 "$top/packaging/apparmor/vetto" "$aa_root/tmp/vetto.profile"
  check "apparmor_parser -QT accepts the profile" chroot "$aa_root" apparmor_parser -QT /tmp/vetto.profile
  names=$(chroot "$aa_root" apparmor_parser -QT -N /tmp/vetto.profile 2>/dev/null | sort | tr '\n' ' ')
  check "the profile defines vetto and vetto-shim ($names)" test "$names" = "vetto vetto-shim "
  check "both profiles grant userns" test "$(grep -c '^  userns,$' "$top/packaging/apparmor/vetto")" = 2
  sed 's/^  userns,$/  usernz,/' "$top/packaging/apparmor/vetto" >"$aa_root/tmp/broken.profile"
  check "a broken copy is rejected (the check can fail)" \
    bash -c "! chroot '$aa_root' apparmor_parser -QT /tmp/broken.profile 2>/dev/null"
  rm -f "$aa_root/tmp/vetto.profile" "$aa_root/tmp/broken.profile"
fi

# --- 3. install and use ------------------------------------------------------------------------
if dpkg -s vetto >/dev/null 2>&1; then apt-get purge -y -q vetto >/dev/null; fi
if apt-get install -y -q "$deb" >/tmp/vetto-deb-install.log 2>&1; then
  ok "apt-get install ./$(basename "$deb")"
else
  tail -20 /tmp/vetto-deb-install.log
  bad "apt-get install ./$(basename "$deb")"
  finish
fi
check "installed: /usr/bin/vetto is the package's" cmp -s /usr/bin/vetto "$bin/vetto"
check "installed: /etc/apparmor.d/vetto" cmp -s /etc/apparmor.d/vetto "$top/packaging/apparmor/vetto"
check "installed: /etc/vetto/shim.toml.example" test -s /etc/vetto/shim.toml.example
check "man finds vetto-run(1)" bash -c 'man -w vetto-run | grep -q /usr/share/man/man1/vetto-run.1.gz'
work=$(mktemp -d /tmp/vetto-deb.XXXXXX)
chmod 755 "$work"
mkdir -p "$work/home" "$work/proj/sub" "$work/run"
echo 'API_KEY=dummy-secret-value' >"$work/proj/.env"
chown -R 65534:65534 "$work/home" "$work/proj" "$work/run"
chmod 700 "$work/run"
as_nobody() {
  (cd "$work/proj" && setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
    env -i HOME="$work/home" XDG_RUNTIME_DIR="$work/run" PATH=/usr/bin:/bin "$@")
}
for who in root nobody; do
  if [ $who = root ]; then
    doc=$(cd "$work/proj" && /usr/bin/vetto doctor --json 2>&1)
  else
    doc=$(as_nobody /usr/bin/vetto doctor --json 2>&1)
  fi
  check "vetto doctor as $who: tier FULL, every self-test check ok" python3 -c '
import json, sys
d = json.loads(sys.argv[1])
st = d.get("selftest") or []
sys.exit(0 if d["tier"] == "FULL" and len(st) >= 9 and all(p["ok"] for p in st) else 1)' "$doc"
done
o=$(as_nobody /usr/bin/vetto run -q -- sh -c 'cat .env; echo ran > sub/out; cat sub/out' 2>&1)
check "the installed vetto sandboxes a command as nobody (.env empty, project writable)" test "$o" = "ran"
rm -rf "$work"

# --- 4. purge ------------------------------------------------------------------------------------
if apt-get purge -y -q vetto >/tmp/vetto-deb-purge.log 2>&1; then ok "apt-get purge vetto"; else bad "apt-get purge vetto"; fi
for p in /usr/bin/vetto /usr/bin/vetto-shim /etc/apparmor.d/vetto /etc/vetto/shim.toml.example /usr/share/man/man1/vetto.1.gz; do
  check "purged: $p" test ! -e "$p"
done
finish
