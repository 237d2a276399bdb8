#!/usr/bin/env bash
# Installs the host packages svc needs to run real VMs and build its guest image, when missing.
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
#   xz-utils          unpacking vmlinux from vmlinuz
#   fakeroot          building the root filesystem when not root
#   socat             vsock relay (agent side) and vsock connector (daemon side)
#   mmdebstrap        the debian image's root filesystem, from the host's apt sources
#   libarchive-tools  bsdtar: the tests check that archives it makes (and GNU tar's) copy in intact
#   skopeo, umoci     importing container images (oci-archive:, docker-archive:): copy, then unpack layers
#   syslinux, syslinux-common, mtools, dosfstools, fdisk
#                     the tests' cloud-style disk (a bootloader, a FAT boot partition, a partition table)
#   gcc, libc6-dev    the daemon's splice helper (native/svc-splice.c; scripts/build-native.mjs)
#   etcd-server       the store a cluster of svcd nodes runs on (docs/cluster.md); the tests start
#                     a three-member etcd of their own on loopback
#   microsocks        the tests' SOCKS5 proxy: a VM's egress tunneled through a proxy of the user's
#   docker-registry   the tests' container registry on loopback: images pulled with docker://REF
set -euo pipefail
pkgs=(qemu-system-x86 qemu-utils linux-image-amd64 busybox-static dropbear-bin e2fsprogs genisoimage kmod cpio xz-utils fakeroot socat mmdebstrap libarchive-tools
  skopeo umoci syslinux syslinux-common mtools dosfstools fdisk gcc libc6-dev etcd-server microsocks docker-registry)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "svc: installing host packages: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
