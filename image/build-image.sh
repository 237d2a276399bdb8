#!/usr/bin/env bash
# Builds svc's guest image from Debian packages (docs/image.md). Usage:
#   build-image.sh OUT_DIR AGENT_DIR
# OUT_DIR gets vmlinux, initrd.img, disk.qcow2 (the golden disk) and manifest.json.
# AGENT_DIR is dist/agent (npm run build:agent). Needs what scripts/ensure-host-deps.sh installs.
set -euo pipefail
OUT=$(realpath -m "$1"); AGENT=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
DISK_MB=${SVC_IMAGE_DISK_MB:-1024}

KVER=${SVC_KERNEL:-$(ls -1 /lib/modules | sort -V | while read -r k; do [ -f "/boot/vmlinuz-$k" ] && echo "$k"; done | tail -1)}
[ -n "$KVER" ] && [ -f "/boot/vmlinuz-$KVER" ] || { echo "build-image: no kernel in /boot (install linux-image-amd64)" >&2; exit 1; }
[ -f "$AGENT/svc-agent.cjs" ] || { echo "build-image: $AGENT/svc-agent.cjs missing (npm run build:agent)" >&2; exit 1; }
NODE=$(command -v node)

WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root; INITRD=$WORK/initrd
mkdir -p "$OUT" "$ROOT" "$INITRD"

# --- kernel: the uncompressed vmlinux (PVH entry) boots seconds faster than vmlinuz under TCG.
extract_vmlinux() {
  local img=$1 out=$2 off
  for off in $(LC_ALL=C grep -abo $'\xfd''7zXZ' "$img" | cut -d: -f1); do
    if { tail -c +$((off + 1)) "$img" || true; } | xz -dc --single-stream > "$out" 2>/dev/null && [ "$(head -c 4 "$out" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      return 0
    fi
  done
  return 1
}
extract_vmlinux "/boot/vmlinuz-$KVER" "$WORK/vmlinux" || { echo "build-image: cannot unpack vmlinux from /boot/vmlinuz-$KVER" >&2; exit 1; }

# --- modules, with their dependencies, in load order.
mods_for() { # prints module paths in load order for the named modules
  for m in "$@"; do modprobe -S "$KVER" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'; done | awk '!seen[$0]++'
}
copy_mods() { # DEST MODULE...
  local dest=$1; shift
  for p in $(mods_for "$@"); do mkdir -p "$dest$(dirname "$p")"; cp "$p" "$dest$p"; done
}
BOOT_MODS="virtio_pci virtio_blk ext4"
ROOT_MODS="virtio_net isofs evdev button virtio_console virtio_rng vmw_vsock_virtio_transport 9p 9pnet_virtio virtiofs"

# --- initramfs: busybox, the modules to reach the root disk, and an init that switch_roots.
mkdir -p "$INITRD"/{bin,dev,proc,sys,newroot}
cp /bin/busybox "$INITRD/bin/busybox"
copy_mods "$INITRD" $BOOT_MODS
mods_for $BOOT_MODS > "$INITRD/modules.order"
install -m 0755 "$HERE/initramfs-init" "$INITRD/init"

# --- root filesystem.
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,lib,lib64,etc,dev,proc,sys,run,tmp,root/.ssh,var/lib/svc/readiness,var/log,mnt/seed,opt/svc,home}
chmod 1777 "$ROOT/tmp"; chmod 0700 "$ROOT/root" "$ROOT/root/.ssh"
cp /bin/busybox "$ROOT/bin/busybox"
for applet in $("$ROOT/bin/busybox" --list-full); do
  [ -e "$ROOT/$applet" ] || ln -s /bin/busybox "$ROOT/$applet"
done
copy_bin() { # copies a binary and the shared libraries it needs, at the same paths
  local bin=$1 dest=${2:-$1}
  mkdir -p "$ROOT$(dirname "$dest")"; cp -L "$bin" "$ROOT$dest"
  for lib in $(ldd "$bin" | awk '/=>/ {print $3} /^\s*\/lib/ {print $1}'); do
    [ -f "$lib" ] || continue
    mkdir -p "$ROOT$(dirname "$lib")"; cp -L "$lib" "$ROOT$lib"
  done
}
copy_bin "$NODE" /usr/local/bin/node
strip --strip-unneeded "$ROOT/usr/local/bin/node" 2>/dev/null || true
copy_bin /usr/sbin/dropbear
[ -e "$ROOT/lib64/ld-linux-x86-64.so.2" ] || { mkdir -p "$ROOT/lib64"; cp -L /lib64/ld-linux-x86-64.so.2 "$ROOT/lib64/"; }
copy_mods "$ROOT" $BOOT_MODS $ROOT_MODS
for f in modules.order modules.builtin modules.builtin.modinfo; do [ -f "/lib/modules/$KVER/$f" ] && cp "/lib/modules/$KVER/$f" "$ROOT/lib/modules/$KVER/"; done
depmod -b "$ROOT" "$KVER"
mkdir -p "$ROOT/opt/svc/agent"
cp -r "$AGENT/svc-agent.cjs" "$AGENT/node_modules" "$ROOT/opt/svc/agent/"
cp -r "$HERE/rootfs/." "$ROOT/"
chmod 0755 "$ROOT"/etc/svc/* "$ROOT/etc/acpi/PWRF/00000080"
ln -sf /bin/busybox "$ROOT/sbin/init"
echo "$KVER" > "$ROOT/etc/svc/kernel"

# --- reproducible timestamps, then ext4 without mounting, then qcow2.
find "$ROOT" "$INITRD" -exec touch -h -d "@$EPOCH" {} +
mke2fs -q -t ext4 -L svc-root -U 5f0c1a5e-5c0e-4c5e-9c5e-000000000001 -E "hash_seed=5f0c1a5e-5c0e-4c5e-9c5e-000000000002,root_owner=0:0" \
  -d "$ROOT" "$WORK/disk.raw" "${DISK_MB}M"
qemu-img convert -q -f raw -O qcow2 "$WORK/disk.raw" "$WORK/disk.qcow2"
(cd "$INITRD" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --reproducible --quiet) | gzip -n -9 > "$WORK/initrd.img"

cp "$WORK/vmlinux" "$OUT/vmlinux.tmp" && mv "$OUT/vmlinux.tmp" "$OUT/vmlinux"
cp "$WORK/initrd.img" "$OUT/initrd.img.tmp" && mv "$OUT/initrd.img.tmp" "$OUT/initrd.img"
cp "$WORK/disk.qcow2" "$OUT/disk.qcow2.tmp" && mv "$OUT/disk.qcow2.tmp" "$OUT/disk.qcow2"
AGENT_VERSION=$(node "$AGENT/svc-agent.cjs" --version)
cat > "$OUT/manifest.json.tmp" <<JSON
{
  "id": "$(basename "$OUT")",
  "format": 1,
  "kernel": "vmlinux",
  "initrd": "initrd.img",
  "disk": "disk.qcow2",
  "disk_gb": $(( (DISK_MB + 1023) / 1024 )),
  "cmdline": "console=ttyS0 root=/dev/vda rw quiet loglevel=3 panic=-1",
  "ssh_user": "root",
  "agent_ready": true,
  "agent_version": "$AGENT_VERSION",
  "kernel_version": "$KVER",
  "node_version": "$(node --version)",
  "busybox": "$(dpkg-query -W -f='${Version}' busybox-static)",
  "dropbear": "$(dpkg-query -W -f='${Version}' dropbear-bin)",
  "built_at": "$(date -u -d "@$EPOCH" +%FT%TZ)"
}
JSON
mv "$OUT/manifest.json.tmp" "$OUT/manifest.json"
echo "build-image: $OUT (kernel $KVER, agent $AGENT_VERSION)" >&2
