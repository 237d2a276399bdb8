# Shared by the guest image builds (sourced): the kernel, its modules and the initramfs, and the
# files every image gets. Expects: KVER, WORK, OUT, HERE (this folder), EPOCH.

# Removes a build's work folder. A chroot tool killed in the middle (mmdebstrap) leaves its /proc,
# /sys and /dev mounts inside it: they are unmounted first (deepest first), and the removal never
# crosses into another filesystem, so nothing outside the folder can be reached through one.
remove_work() { # DIR
  local dir=$1 m
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  for m in $(findmnt -rn -o TARGET | grep -F "$dir/" | sort -r); do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$dir"
}

pick_kernel() { # the newest installed kernel with a vmlinuz in /boot
  KVER=${SVC_KERNEL:-$(ls -1 /lib/modules | sort -V | while read -r k; do [ -f "/boot/vmlinuz-$k" ] && echo "$k"; done | tail -1)}
  [ -n "$KVER" ] && [ -f "/boot/vmlinuz-$KVER" ] || { echo "build-image: no kernel in /boot (install linux-image-amd64)" >&2; exit 1; }
}

# The uncompressed vmlinux (PVH entry) boots seconds faster than vmlinuz under TCG.
extract_vmlinux() {
  local img=$1 out=$2 off
  for off in $(LC_ALL=C grep -abo $'\xfd''7zXZ' "$img" | cut -d: -f1); do
    if { tail -c +$((off + 1)) "$img" || true; } | xz -dc --single-stream > "$out" 2>/dev/null && [ "$(head -c 4 "$out" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      return 0
    fi
  done
  return 1
}

mods_for() { # module paths in load order for the named modules, with their dependencies
  for m in "$@"; do modprobe -S "$KVER" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'; done | awk '!seen[$0]++'
}
copy_mods() { # DEST MODULE...
  local dest=$1; shift
  for p in $(mods_for "$@"); do mkdir -p "$dest$(dirname "$p")"; cp "$p" "$dest$p"; done
}
BOOT_MODS="virtio_pci virtio_blk ext4"
ROOT_MODS="virtio_net isofs evdev button virtio_console virtio_rng vmw_vsock_virtio_transport 9p 9pnet_virtio virtiofs overlay af_packet"

# Kernel and initramfs (busybox, the modules that reach the root disk, an init that switch_roots).
build_boot() {
  extract_vmlinux "/boot/vmlinuz-$KVER" "$WORK/vmlinux" || { echo "build-image: cannot unpack vmlinux from /boot/vmlinuz-$KVER" >&2; exit 1; }
  local initrd=$WORK/initrd
  mkdir -p "$initrd"/{bin,dev,proc,sys,newroot}
  cp /bin/busybox "$initrd/bin/busybox"
  copy_mods "$initrd" $BOOT_MODS
  mods_for $BOOT_MODS > "$initrd/modules.order"
  install -m 0755 "$HERE/initramfs-init" "$initrd/init"
  find "$initrd" -exec touch -h -d "@$EPOCH" {} +
  (cd "$initrd" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --reproducible --quiet) | gzip -n -9 > "$WORK/initrd.img"
}

# The root filesystem's kernel modules (those the guest loads), indexed.
install_modules() { # ROOT
  copy_mods "$1" $BOOT_MODS $ROOT_MODS
  for f in modules.order modules.builtin modules.builtin.modinfo; do [ -f "/lib/modules/$KVER/$f" ] && cp "/lib/modules/$KVER/$f" "$1/lib/modules/$KVER/"; done
  depmod -b "$1" "$KVER"
}

# The agent: node and the bundled agent with its PTY addon.
install_agent() { # ROOT AGENT_DIR
  mkdir -p "$1/opt/svc/agent" "$1/usr/local/bin"
  cp -r "$2/svc-agent.cjs" "$2/node_modules" "$1/opt/svc/agent/"
}

# ext4 from the directory without mounting, sized to the content plus room, then a qcow2.
# Sets DISK_GB (the smallest disk a VM of this image may have).
make_disk() { # ROOT [MIN_MB]
  local root=$1 min_mb=${2:-0} used_mb size_mb
  find "$root" -exec touch -h -d "@$EPOCH" {} +
  used_mb=$(du -sm --apparent-size "$root" | cut -f1)
  size_mb=$(( used_mb + used_mb / 3 + 200 ))
  [ "$size_mb" -ge "$min_mb" ] || size_mb=$min_mb
  size_mb=$(( (size_mb + 1023) / 1024 * 1024 ))
  DISK_GB=$(( size_mb / 1024 ))
  mke2fs -q -t ext4 -L svc-root -U 5f0c1a5e-5c0e-4c5e-9c5e-000000000001 -E "hash_seed=5f0c1a5e-5c0e-4c5e-9c5e-000000000002,root_owner=0:0" \
    -d "$root" "$WORK/disk.raw" "${size_mb}M"
  qemu-img convert -q -f raw -O qcow2 "$WORK/disk.raw" "$WORK/disk.qcow2"
  rm -f "$WORK/disk.raw"
}

# Moves the built files into OUT; the manifest goes last, so an image without one is not an image.
publish() { # MANIFEST_JSON
  mkdir -p "$OUT"
  rm -f "$OUT/manifest.json"
  for f in vmlinux initrd.img disk.qcow2; do cp "$WORK/$f" "$OUT/$f.tmp" && mv "$OUT/$f.tmp" "$OUT/$f"; done
  printf '%s\n' "$1" > "$OUT/manifest.json.tmp"
  sync -f "$OUT/manifest.json.tmp" 2>/dev/null || true
  mv "$OUT/manifest.json.tmp" "$OUT/manifest.json"
}

progress() { # PERCENT MESSAGE: a progress line the daemon turns into create/build events
  echo "svc-progress $1 $2" >&2
}
