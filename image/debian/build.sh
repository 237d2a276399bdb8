# Sourced by build-image.sh: the default image, a normal Debian (the host's release) made by
# mmdebstrap from the Debian archive the host's apt is configured for, booted with systemd.
ROOT=$WORK/root
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
# The host's apt sources, as mmdebstrap takes them: each file is read as a sources list.
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && grep -qv '^[[:space:]]*\(#\|$\)' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { echo "build-image: the host has no apt sources to build from" >&2; exit 1; }
# Python's data packages are those E2B's code interpreter template has that Debian has without a
# compiler: python3-munkres stands for fonttools' other choice, scipy, which brings g++ and boost.
PYDATA=python3-numpy,python3-pandas,python3-matplotlib,python3-munkres,python3-pil,python3-requests,python3-bs4,python3-openpyxl,python3-yaml
PACKAGES=${SVC_DEBIAN_PACKAGES:-systemd,systemd-sysv,udev,dbus,kmod,apt,bash,coreutils,python3,python3-pip,python3-venv,$PYDATA,ca-certificates,curl,git,sudo,openssh-server,iproute2,iputils-ping,procps,less,e2fsprogs,netbase,util-linux}
progress 5 "debian $SUITE packages with mmdebstrap"
mmdebstrap --variant=minbase --include="$PACKAGES" --skip=cleanup/apt/lists \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  "$SUITE" "$ROOT" "${sources[@]}" < /dev/null 2> "$WORK/mmdebstrap.log" || { tail -20 "$WORK/mmdebstrap.log" >&2; exit 1; }
progress 60 "agent, users and services"
install_modules "$ROOT"
install_agent "$ROOT" "$AGENT"
cp -L "$(command -v node)" "$ROOT/usr/local/bin/node"
strip --strip-unneeded "$ROOT/usr/local/bin/node" 2>/dev/null || true
cp -r "$HERE/debian/rootfs/." "$ROOT/"
chmod 0755 "$ROOT"/usr/local/lib/svc/*
chmod 0440 "$ROOT/etc/sudoers.d/svc"
mkdir -p "$ROOT"/{var/lib/svc/readiness,srv,mnt/seed,opt/svc} "$ROOT/root/.ssh"
chmod 0700 "$ROOT/root/.ssh"
echo "$KVER" > "$ROOT/etc/svc-kernel"
echo svc > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$ROOT/etc/hosts"
# mmdebstrap copies these two from the host with the host's modes (0755 on some hosts).
chmod 0644 "$ROOT/etc/hostname" "$ROOT/etc/hosts"
rm -f "$ROOT/etc/resolv.conf"; echo "nameserver 10.0.2.3" > "$ROOT/etc/resolv.conf"
echo "/dev/vda / ext4 rw,discard,errors=remount-ro 0 1" > "$ROOT/etc/fstab"
# Every VM gets its own machine id (systemd makes one at first boot) and its own SSH host keys.
: > "$ROOT/etc/machine-id"; rm -f "$ROOT/var/lib/dbus/machine-id"
rm -f "$ROOT"/etc/ssh/ssh_host_*
chroot "$ROOT" useradd -m -s /bin/bash -G sudo -c "svc user" svc
chroot "$ROOT" passwd -l root >/dev/null
# matplotlib's font list, which its first import makes (seconds under TCG), made now for both users
if [ -d "$ROOT/usr/lib/python3/dist-packages/matplotlib" ]; then
  for home in /root /home/svc; do chroot "$ROOT" env HOME=$home python3 -c 'import matplotlib.font_manager'; done
  chroot "$ROOT" chown -R svc:svc /home/svc/.cache
fi
chroot "$ROOT" systemctl enable -q svc-seed.service svc-growfs.service svc-agent.service svc-userdata.service systemd-networkd.service
chroot "$ROOT" systemctl mask -q systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service
rm -rf "$ROOT/var/cache/apt/archives/"*.deb "$ROOT/var/log/"*.log "$ROOT/var/log/apt/"* "$ROOT/tmp/"* "$ROOT/var/tmp/"*
progress 75 "disk image"
make_disk "$ROOT" 2048
AGENT_VERSION=$(node "$AGENT/svc-agent.cjs" --version)
DEB_VERSION=$(cat "$ROOT/etc/debian_version")
publish "$(cat <<JSON
{
  "id": "$(basename "$OUT")",
  "format": 1,
  "os": "Debian GNU/Linux $DEB_VERSION ($SUITE)",
  "description": "Debian $SUITE with systemd, apt, python3 with pip, venv, numpy, pandas and matplotlib, git, curl, sudo and openssh-server; the default image",
  "kernel": "vmlinux",
  "initrd": "initrd.img",
  "disk": "disk.qcow2",
  "disk_gb": $DISK_GB,
  "cmdline": "console=ttyS0 root=/dev/vda rw panic=-1 net.ifnames=0",
  "ssh_user": "root",
  "agent_ready": true,
  "boot": "kernel",
  "source": "debian",
  "agent_version": "$AGENT_VERSION",
  "kernel_version": "$KVER",
  "node_version": "$(node --version)",
  "built_at": "$(date -u -d "@$EPOCH" +%FT%TZ)"
}
JSON
)"
