#!/usr/bin/env bash
# Installs the host packages svc needs to run real VMs and build its guest image, when missing;
# with --tests, also those only its tests use. Usage: ensure-host-deps.sh [--tests]
# What it installs, and why:
#   qemu-system-x86   the hypervisor (qemu-system-x86_64)
#   qemu-utils        qemu-img: qcow2 golden disks and per-VM overlays
#   linux-image-amd64 the guest kernel (vmlinuz + modules) the image is built from
#   busybox-static    the guest userland and the initramfs
#   dropbear-bin      the guest SSH server
#   e2fsprogs         mke2fs -d: the root filesystem without mounting
#   genisoimage       the cloud-init NoCloud seed (cidata) of each VM
#   kmod              modprobe --show-depends / depmod for the guest's modules
#   cpio              the initramfs
#   xz-utils          unpacking vmlinux from vmlinuz, and imported disks shipped as .xz
#   zstd, bzip2       unpacking imported disks shipped as .zst or .bz2
#   fakeroot          building the root filesystem when not root
#   socat             vsock relay (agent side) and vsock connector (daemon side)
#   mmdebstrap        the debian image's root filesystem, from the host's apt sources
#   skopeo, umoci     importing container images (oci-archive:, docker-archive:, docker://): copy, then unpack layers
#   gcc, libc6-dev    the daemon's splice helper (native/svc-splice.c; scripts/build-native.mjs)
#   etcd-server       the store a cluster of svcd nodes runs on (docs/cluster.md); the tests start
#                     a three-member etcd of their own on loopback
# With --tests:
#   libarchive-tools  bsdtar: the tests check that archives it makes (and GNU tar's) copy in intact
#   syslinux, syslinux-common, mtools, dosfstools, fdisk
#                     the tests' cloud-style disk (a bootloader, a FAT boot partition, a partition table)
#   microsocks        the tests' SOCKS5 proxy: a VM's egress tunneled through a proxy of the user's
#   docker-registry   the tests' container registry on loopback: images pulled with docker://REF
#   openssl           a certificate of the tests' own making, which a download from its URL must not trust
#   openssh-client    ssh-keygen: the unit test of a clone's SSH host keys made anew
#   python3           running svc's E2B code interpreter server (src/adapters/code-interpreter/code-interpreter.py) on this host
#   python3-matplotlib, python3-munkres, python3-pandas
#                     that server's figures, charts and DataFrames, with Debian's packages as a debian guest
#                     has them (munkres: fonttools then takes it instead of scipy, which it does not need here)
# No service a package ships is started by its install (a policy-rc.d for the install's length,
# where the host has none): svc and its tests start etcd and the registry themselves, when needed.
set -euo pipefail
pkgs=(qemu-system-x86 qemu-utils linux-image-amd64 busybox-static dropbear-bin e2fsprogs genisoimage kmod cpio xz-utils zstd bzip2 fakeroot socat mmdebstrap
  skopeo umoci gcc libc6-dev etcd-server)
[ "${1:-}" = --tests ] && pkgs+=(libarchive-tools syslinux syslinux-common mtools dosfstools fdisk microsocks docker-registry openssl openssh-client python3 python3-matplotlib python3-munkres python3-pandas)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "svc: installing host packages: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 0755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
