#!/usr/bin/env bash
# Builds virtcon's test guest from Debian packages, under build/guest/:
#
#   vmlinuz          the Debian kernel (linux-image-$GUEST_KERNEL_FLAVOUR's current version)
#   initrd.img       busybox + the virtio/virtio-scsi/cdrom/ACPI modules + scripts/guest/init:
#                    prints VIRTCON-* markers on ttyS0, reads the NoCloud seed, DHCPs eth0,
#                    powers off on the ACPI power button (QMP system_powerdown)
#   initrd-deaf.img  the same, but ignores the power button (stops only when killed)
#   vmlinux          the same kernel, decompressed (ELF, best effort): QEMU's -kernel boots it
#                    by PVH and skips the kernel's self-decompression, ~3 s under TCG
#
# Idempotent: a stamp holds a hash of this script, scripts/guest/ and the package versions;
# with outputs present and nothing changed it does nothing. The .debs are cached under
# build/guest/cache/. Needs root only to download (apt-get) a package that is not cached.
#
# Environment:
#   GUEST_KERNEL_FLAVOUR  Debian kernel flavour (default cloud-amd64, the kernel of Debian's
#                         genericcloud images: it boots faster under TCG and has no AHCI, so
#                         the integration tests fail if virt puts the NoCloud seed back on a
#                         SATA cdrom; virt attaches it on virtio-scsi). "amd64" works too,
#                         but the seed tests then fail: they want the cloud kernel.
#   GUEST_OUT             output directory (default <repo>/build/guest)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=$repo/scripts/guest
out=${GUEST_OUT:-$repo/build/guest}
cache=$out/cache
flavour=${GUEST_KERNEL_FLAVOUR:-cloud-amd64}
arch=amd64
stamp=$out/.stamp
outputs=("$out/vmlinuz" "$out/initrd.img" "$out/initrd-deaf.img")

# Modules the guest loads, in this order (their dependencies are added from the .ko files,
# ahead of them). One that is built into the kernel is skipped. The SCSI upper drivers
# (sd_mod, sr_mod) come before virtio_scsi, so its scan attaches the seed's /dev/sr0 at once.
# No AHCI/libata: the seed is a scsi-cd on virtio-scsi, and the cloud kernel has no AHCI.
modules=(
  virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
  scsi_mod sd_mod cdrom sr_mod isofs
  virtio_blk virtio_scsi virtio_net virtio_rng virtio_console
  evdev button
)

log() { echo "mkguest: $*" >&2; }
die() { log "error: $*"; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

mkdir -p "$out" "$cache"

# --- fast path: nothing changed since the last build ---------------------------------
srchash=$( { cat "${BASH_SOURCE[0]}"; (cd "$src" && find . -type f | LC_ALL=C sort | xargs cat); \
  echo "flavour=$flavour modules=${modules[*]}"; } | sha256sum | cut -c1-64)
# apt's package lists: while they are unchanged, so are the candidate versions.
listsfp=$( { stat -c '%n %Y %s' /var/lib/apt/lists/*Packages* 2>/dev/null || true; } | sha256sum | cut -c1-64)

stampval() { sed -n "s/^$1=//p" "$stamp" 2>/dev/null; }
have_outputs() {
  local f
  for f in "${outputs[@]}"; do [ -s "$f" ] || return 1; done
  [ "$(stampval vmlinux)" != yes ] || [ -s "$out/vmlinux" ]
}

if have_outputs && [ "$(stampval src)" = "$srchash" ] && [ "$(stampval lists)" = "$listsfp" ]; then
  log "up to date ($(stampval kpkg) $(stampval kver), busybox $(stampval bbver))"
  exit 0
fi

# --- resolve the package versions ------------------------------------------------------
# Sets kpkg, kver, bbver from apt's lists (one apt-cache call: the metapackage pins the
# version of the kernel package it depends on).
resolve_apt() {
  local meta=linux-image-$flavour info dep
  info=$(apt-cache show --no-all-versions "$meta" busybox-static 2>/dev/null) || return 1
  dep=$(awk -v m="$meta" '/^Package: /{p=$2} p==m && /^Depends: /' <<<"$info" \
    | grep -oE "linux-image-[0-9][^ ,]*-$flavour( \(= [^)]*\))?" | head -n1) || return 1
  kpkg=${dep%% *}
  kver=$(sed -n 's/.*(= \(.*\))$/\1/p' <<<"$dep")
  if [ -z "$kver" ]; then
    kver=$(apt-cache show --no-all-versions "$kpkg" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
  fi
  bbver=$(awk '/^Package: /{p=$2} p=="busybox-static" && /^Version: /{print $2; exit}' <<<"$info")
  [ -n "$kpkg" ] && [ -n "$kver" ] && [ -n "$bbver" ]
}

# Without usable lists (and not root to refresh them): the newest cached .debs.
resolve_cache() {
  local k b
  k=$( { ls "$cache"/linux-image-[0-9]*-"${flavour}"_*_"$arch".deb 2>/dev/null || true; } | sort -V | tail -n1)
  b=$( { ls "$cache"/busybox-static_*_"$arch".deb 2>/dev/null || true; } | sort -V | tail -n1)
  [ -n "$k" ] && [ -n "$b" ] || return 1
  kpkg=$(dpkg-deb -f "$k" Package); kver=$(dpkg-deb -f "$k" Version)
  bbver=$(dpkg-deb -f "$b" Version)
  log "apt lists unusable: using the cached $kpkg $kver and busybox-static $bbver"
}

apt_updated=0
apt_update() {
  [ "$apt_updated" = 0 ] && is_root || return 1
  log "apt-get update"
  apt-get update -qq >&2 || return 1
  apt_updated=1
}

[ "$(dpkg --print-architecture 2>/dev/null || echo "$arch")" = "$arch" ] \
  || log "warning: host is not $arch; the guest is x86_64 (busybox runs here to list applets)"

if ! resolve_apt; then
  if ! { apt_update && resolve_apt; } && ! resolve_cache; then
    die "cannot resolve linux-image-$flavour / busybox-static (no apt lists, nothing cached; run as root)"
  fi
fi

key=$(echo "$srchash $kpkg=$kver busybox-static=$bbver" | sha256sum | cut -c1-64)
write_stamp() {
  printf 'key=%s\nsrc=%s\nlists=%s\nkpkg=%s\nkver=%s\nbbver=%s\nvmlinux=%s\n' \
    "$key" "$srchash" "$listsfp" "$kpkg" "$kver" "$bbver" "${vmlinux:-$(stampval vmlinux)}" >"$stamp.tmp"
  mv -f "$stamp.tmp" "$stamp"
}
if have_outputs && [ "$(stampval key)" = "$key" ]; then
  write_stamp   # the lists changed, the versions did not
  log "up to date ($kpkg $kver, busybox $bbver)"
  exit 0
fi
log "building the guest: $kpkg $kver, busybox-static $bbver"

# --- download (cached) -------------------------------------------------------------
debfile() { echo "$cache/${1}_${2//:/%3a}_$arch.deb"; }
fetch() { # pkg version
  local pkg=$1 ver=$2 f dl rc=0
  f=$(debfile "$pkg" "$ver")
  [ -s "$f" ] && return 0
  is_root || [ -w "$cache" ] || die "cannot write $cache"
  log "downloading $pkg $ver"
  dl=$(mktemp -d "$cache/dl.XXXXXX")
  (cd "$dl" && apt-get download -q "$pkg=$ver" >"$dl/log" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] && apt_update; then
    rc=0; (cd "$dl" && apt-get download -q "$pkg=$ver" >"$dl/log" 2>&1) || rc=$?
  fi
  if [ "$rc" -ne 0 ]; then
    cat "$dl/log" >&2; rm -rf "$dl"
    die "apt-get download $pkg=$ver failed"
  fi
  mv -f "$dl"/*.deb "$f"
  rm -rf "$dl"
}
fetch "$kpkg" "$kver"
fetch busybox-static "$bbver"
# Drop superseded .debs of the same flavour.
for f in "$cache"/linux-image-[0-9]*-"${flavour}"_*.deb "$cache"/busybox-static_*.deb; do
  [ -e "$f" ] || continue
  case "$f" in "$(debfile "$kpkg" "$kver")" | "$(debfile busybox-static "$bbver")") ;; *) rm -f "$f" ;; esac
done

# --- unpack --------------------------------------------------------------------------
work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "unpacking"
dpkg -x "$(debfile "$kpkg" "$kver")" "$work/kernel"
dpkg -x "$(debfile busybox-static "$bbver")" "$work/busybox"
kimg='' kdir=''
for f in "$work"/kernel/boot/vmlinuz-*; do [ -f "$f" ] && kimg=$f && break; done
for f in "$work"/kernel/lib/modules/* "$work"/kernel/usr/lib/modules/*; do [ -d "$f" ] && kdir=$f && break; done
if [ -z "$kimg" ] || [ -z "$kdir" ]; then die "$kpkg has no vmlinuz or modules"; fi
bb=$work/busybox/bin/busybox
[ -x "$bb" ] || die "busybox-static has no bin/busybox"

# --- modules: dependency closure, in load order ------------------------------------------
declare -A kofile=() builtin=() seen=()
while IFS= read -r f; do
  n=${f##*/}; n=${n%%.ko*}; kofile[${n//-/_}]=$f
done < <(cd "$kdir" && find kernel -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz')
while IFS= read -r f; do
  n=${f##*/}; n=${n%%.ko*}; builtin[${n//-/_}]=1
done < <(cat "$kdir/modules.builtin" 2>/dev/null)

# ko_cat FILE: the uncompressed module
ko_cat() {
  case "$1" in
    *.ko) cat "$1" ;;
    *.ko.xz) xz -dc "$1" ;;
    *.ko.zst) zstd -dcq "$1" ;;
    *.ko.gz) gzip -dc "$1" ;;
  esac
}
order=()
visit() {
  local n=${1//-/_} f d
  [ -z "${seen[$n]:-}" ] || return 0
  seen[$n]=1
  f=${kofile[$n]:-}
  if [ -z "$f" ]; then
    [ -n "${builtin[$n]:-}" ] || log "warning: module $n is neither a module nor built in; skipped"
    return 0
  fi
  mkdir -p "$work/mods"
  ko_cat "$kdir/$f" >"$work/mods/$n.ko"
  # depends= in the .modinfo section (what modinfo -F depends prints)
  for d in $(tr '\0' '\n' <"$work/mods/$n.ko" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' '); do
    visit "$d"
  done
  order+=("$n")
}
for m in "${modules[@]}"; do visit "$m"; done
log "modules (${#order[@]}): ${order[*]}"

# --- the initramfs tree ------------------------------------------------------------------
root=$work/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,mnt/seed,etc/acpi,etc/udhcpc,var/log,lib/modules}
cp "$bb" "$root/bin/busybox"
while IFS= read -r a; do
  case "$a" in */*) ;; *) continue ;; esac   # skip linuxrc (we have our own /init)
  [ "$a" = bin/busybox ] || [ -e "$root/$a" ] || ln -s /bin/busybox "$root/$a"
done < <("$bb" --list-full)
for n in "${order[@]}"; do cp "$work/mods/$n.ko" "$root/lib/modules/"; done
printf '%s\n' "${order[@]}" >"$root/lib/modules/load.order"
install -m 0755 "$src/init" "$root/init"
install -m 0755 "$src/udhcpc.script" "$root/etc/udhcpc/default.script"   # Debian busybox's default
install -m 0755 "$src/power.sh" "$root/etc/acpi/power.sh"
echo 'PWRF power.sh' >"$root/etc/acpid.conf"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
echo virtcon-guest >"$root/etc/hostname"
printf 'kernel=%s %s\nbusybox=%s\n' "$kpkg" "$kver" "$bbver" >"$root/etc/virtcon-guest"
chmod 1777 "$root/tmp"
find "$root" -exec touch -h -d @0 {} +   # reproducible archives

# mkcpio OUT [EXCLUDE_REGEX]: newc archive of the tree, gzipped, owned by root
mkcpio() {
  local dest=$1 excl=${2:-^$}
  (cd "$root" && find . -mindepth 1 | LC_ALL=C sort | grep -vE "$excl" \
    | "$bb" cpio -o -H newc -R 0:0 --renumber-inodes --ignore-devno 2>/dev/null) \
    | gzip -9n >"$dest.tmp"
  mv -f "$dest.tmp" "$dest"
}
log "writing initrd.img and initrd-deaf.img"
mkcpio "$out/initrd.img"
mkcpio "$out/initrd-deaf.img" '^\./etc/(acpid\.conf|acpi/)'   # no acpid: ignores the power button
cp "$kimg" "$out/vmlinuz.tmp" && mv -f "$out/vmlinuz.tmp" "$out/vmlinuz"

# vmlinux: the ELF inside the bzImage, at the first compressed stream that decompresses to
# one (like the kernel's scripts/extract-vmlinux). Best effort: skipped if no tool fits.
extract_vmlinux() { # BZIMAGE DEST
  local magic tool off
  for magic in '\xfd7zXZ\x00:xz -dc' '\x1f\x8b\x08:gzip -dc' '\x28\xb5\x2f\xfd:zstd -dcq' '\x02\x21\x4c\x18:lz4 -dc'; do
    tool=${magic#*:}
    command -v "${tool%% *}" >/dev/null || continue
    for off in $(LC_ALL=C grep -obUaP "${magic%%:*}" "$1" 2>/dev/null | cut -d: -f1 | head -n 3); do
      tail -c +$((off + 1)) "$1" | $tool >"$2" 2>/dev/null || true
      [ "$(head -c 4 "$2" | od -An -c | tr -d ' ')" = '177ELF' ] && return 0
    done
  done
  rm -f "$2"
  return 1
}
if extract_vmlinux "$kimg" "$out/vmlinux.tmp"; then
  mv -f "$out/vmlinux.tmp" "$out/vmlinux"; vmlinux=yes
else
  rm -f "$out/vmlinux"; vmlinux=no
  log "note: could not decompress the kernel; no vmlinux (vmlinuz works, only slower under TCG)"
fi
write_stamp
built=("${outputs[@]}"); [ "$vmlinux" = no ] || built+=("$out/vmlinux")
log "done: $(for f in "${built[@]}"; do printf '%s %s  ' "${f##*/}" "$(du -h "$f" | cut -f1)"; done)"
