#!/usr/bin/env bash
# Sets up libvirt as a peer on this host, for `make bench` (virsh start as the
# baseline) and for checking that libvirt guests are listed as EXTERNAL.
# Root only. Idempotent. Domains use type='qemu' (TCG): no working KVM is assumed.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "libvirt-peer: needs root" >&2; exit 4; }
export DEBIAN_FRONTEND=noninteractive
if ! command -v libvirtd >/dev/null || ! command -v virsh >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients >/dev/null
fi
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
id libvirt-qemu >/dev/null 2>&1 || useradd -r -g libvirt-qemu -G kvm libvirt-qemu
conf=/etc/libvirt/qemu.conf
touch "$conf"
grep -q '^user = "root"' "$conf" || echo 'user = "root"' >>"$conf"
grep -q '^group = "root"' "$conf" || echo 'group = "root"' >>"$conf"
mkdir -p /var/log/libvirt /var/lib/libvirt /run/libvirt
pgrep -x virtlogd >/dev/null || virtlogd -d
pgrep -x libvirtd >/dev/null || libvirtd -d
for _ in $(seq 50); do virsh -c qemu:///system version >/dev/null 2>&1 && exit 0; sleep 0.1; done
echo "libvirt-peer: libvirtd did not answer" >&2
exit 1
