#!/usr/bin/env bash
# Installs what virtcon's tests need on Debian/Ubuntu (run as root).
# Idempotent: apt runs only when a package is missing.
set -euo pipefail
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}

# what building needs: bin/dcui links PAM through cgo
build_pkgs=(gcc libc6-dev libpam0g-dev)
pkgs=("${build_pkgs[@]}" qemu-system-x86 qemu-utils ovmf pci.ids jq tmux cpio kmod xz-utils genisoimage xorriso isolinux syslinux-common iproute2 dnsmasq-base nftables busybox-static passwd dbus-daemon systemd util-linux lintian man-db chromium protobuf-compiler)
build_only=false
if [ "${1:-}" = "--build" ]; then   # `make run`: only what the build needs
  pkgs=("${build_pkgs[@]}")
  build_only=true
  shift
fi
extra=("$@")   # e.g. libvirt-clients hyperfine for `make bench`
want=("${pkgs[@]}" "${extra[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]} (run with sudo)" >&2
    exit 4
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if $build_only; then exit 0; fi

# staticcheck for `make lint`, from the Go module proxy.
if ! command -v staticcheck >/dev/null && [ ! -x "$("$GO" env GOPATH)/bin/staticcheck" ]; then
  echo "install-deps: installing staticcheck" >&2
  GOFLAGS=-mod=mod "$GO" install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
