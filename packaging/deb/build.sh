#!/usr/bin/env bash
# Build the Debian package of vetto from release binaries, with dpkg-deb (no debhelper):
#   /usr/bin/vetto, /usr/bin/vetto-shim, man pages, bash/zsh/fish completions,
#   /etc/apparmor.d/vetto (loaded by postinst where AppArmor is enabled),
#   /etc/vetto/shim.toml.example.
#
# usage: packaging/deb/build.sh BIN_DIR OUT_DIR      (`make deb`: target/release target/deb)
# Prints the path of the .deb it wrote.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=$(realpath "${1:?usage: build.sh BIN_DIR OUT_DIR}")
out=$(realpath -m "${2:?usage: build.sh BIN_DIR OUT_DIR}")
for b in vetto vetto-shim; do
  [ -x "$bin/$b" ] || { echo "build.sh: $bin/$b is missing (cargo build --release -p vetto)" >&2; exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$top/Cargo.toml" | head -1)
[ -n "$version" ] || { echo "build.sh: no version in Cargo.toml" >&2; exit 1; }
arch=$(dpkg --print-architecture)
mkdir -p "$out"
stage=$(mktemp -d "$out/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root

install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" "$root/etc/apparmor.d" "$root/etc/vetto" \
  "$root/usr/share/doc/vetto"
install -m 0755 "$bin/vetto" "$bin/vetto-shim" "$root/usr/bin/"
"$bin/vetto" man --out "$stage/man" >/dev/null
for m in "$stage"/man/*.1; do
  gzip -9n <"$m" >"$root/usr/share/man/man1/$(basename "$m").gz"
done
"$bin/vetto" completions bash >"$root/usr/share/bash-completion/completions/vetto"
"$bin/vetto" completions zsh >"$root/usr/share/zsh/vendor-completions/_vetto"
"$bin/vetto" completions fish >"$root/usr/share/fish/vendor_completions.d/vetto.fish"
install -m 0644 "$top/packaging/apparmor/vetto" "$root/etc/apparmor.d/vetto"
install -m 0644 "$top/packaging/shim.toml.example" "$root/etc/vetto/shim.toml.example"
install -m 0644 "$top/README.md" "$root/usr/share/doc/vetto/README.md"
cat >"$root/usr/share/doc/vetto/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: vetto
Files: *
Copyright: the vetto authors
License: $(sed -n 's/^license = "\(.*\)"$/\1/p' "$top/Cargo.toml" | head -1)
EOF

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: vetto
Version: $version
Architecture: $arch
Maintainer: vetto developers <vetto@example.invalid>
Installed-Size: $size
Depends: libc6 (>= 2.34)
Recommends: uidmap
Suggests: apparmor
Section: admin
Priority: optional
Homepage: https://example.invalid/vetto
Description: sandbox for AI coding agents, and an OCI runtime
 vetto runs an agent (or any command) with no access to the developer's
 secrets, no writes outside the project, no network except through a checked
 broker, and no process outliving the session: namespaces, Landlock and
 seccomp (tier FULL), or Landlock and seccomp alone where user namespaces are
 unavailable (tier FS-ONLY). vetto-shim is the same engine as an OCI runtime
 for Docker, Podman and containerd.
EOF
printf '/etc/apparmor.d/vetto\n/etc/vetto/shim.toml.example\n' >"$root/DEBIAN/conffiles"
cat >"$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# Load vetto's AppArmor profile (it grants `userns`, for Ubuntu's restriction of unprivileged
# user namespaces) where AppArmor is enabled; elsewhere there is nothing to load.
set -e
if [ "$1" = configure ] && command -v apparmor_parser >/dev/null 2>&1 \
   && [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
  apparmor_parser -r -T -W /etc/apparmor.d/vetto \
    || echo "vetto: the AppArmor profile /etc/apparmor.d/vetto could not be loaded (AppArmor 4.0 or later is needed for its userns rule); see vetto doctor" >&2
fi
exit 0
EOF
cat >"$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
  if command -v apparmor_parser >/dev/null 2>&1 \
     && [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
    printf 'profile vetto {}\nprofile vetto-shim {}\n' | apparmor_parser -R >/dev/null 2>&1 || true
  fi
fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"
deb="$out/vetto_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
