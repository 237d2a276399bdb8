# Sourced by build-image.sh: the small image. busybox init, dropbear, node and the agent; boots in
# seconds under TCG. Not a full Debian: no apt, no systemd (that is the debian image).
ROOT=$WORK/root
progress 10 "busybox root filesystem"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,usr/local/sbin,usr/local/lib,usr/share,lib,lib64,etc,dev,proc,sys,run,tmp,var/tmp,var/log,var/lib/svc/readiness,root/.ssh,mnt/seed,opt/svc,home,srv,media}
chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp"; chmod 0700 "$ROOT/root" "$ROOT/root/.ssh"
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
copy_bin "$(command -v node)" /usr/local/bin/node
strip --strip-unneeded "$ROOT/usr/local/bin/node" 2>/dev/null || true
copy_bin /usr/sbin/dropbear
copy_bin /sbin/resize2fs /usr/sbin/resize2fs
[ -e "$ROOT/lib64/ld-linux-x86-64.so.2" ] || { mkdir -p "$ROOT/lib64"; cp -L /lib64/ld-linux-x86-64.so.2 "$ROOT/lib64/"; }
install_modules "$ROOT"
install_agent "$ROOT" "$AGENT"
cp -r "$HERE/minimal/rootfs/." "$ROOT/"
chmod 0755 "$ROOT"/etc/svc/* "$ROOT/etc/acpi/PWRF/00000080"
ln -sf /bin/busybox "$ROOT/sbin/init"
echo "$KVER" > "$ROOT/etc/svc/kernel"
# What a program reads to know the system (os-release(5)): scripts, Python's platform, installers.
BUSYBOX_VERSION=$(dpkg-query -W -f='${Version}' busybox-static)
UPSTREAM=${BUSYBOX_VERSION#*:}
mkdir -p "$ROOT/usr/lib"
printf '%s\n' 'NAME="svc minimal"' 'ID=svc-minimal' "VERSION_ID=${UPSTREAM%%[-+~]*}" \
  "PRETTY_NAME=\"svc minimal (busybox $BUSYBOX_VERSION)\"" > "$ROOT/usr/lib/os-release"
ln -sf ../usr/lib/os-release "$ROOT/etc/os-release"
progress 70 "disk image"
make_disk "$ROOT" 1024
AGENT_VERSION=$(node "$AGENT/svc-agent.cjs" --version)
publish "$(cat <<JSON
{
  "id": "$(basename "$OUT")",
  "format": 1,
  "os": "svc minimal (busybox $BUSYBOX_VERSION)",
  "description": "The small image: busybox init, dropbear and the agent; the fastest boots",
  "kernel": "vmlinux",
  "initrd": "initrd.img",
  "disk": "disk.qcow2",
  "disk_gb": $DISK_GB,
  "cmdline": "console=ttyS0 root=/dev/vda rw panic=-1",
  "ssh_user": "root",
  "agent_ready": true,
  "boot": "kernel",
  "source": "minimal",
  "agent_version": "$AGENT_VERSION",
  "kernel_version": "$KVER",
  "node_version": "$(node --version)",
  "built_at": "$(date -u -d "@$EPOCH" +%FT%TZ)"
}
JSON
)"
