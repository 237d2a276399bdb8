# Sourced by build-image.sh (kind oci): a golden image from a container image (OCI or docker archive).
# skopeo copies the archive into an OCI layout, umoci applies its layers (whiteouts, owners,
# modes, links); the root filesystem gets svc's own init, busybox, node and the agent under
# /opt/svc (nothing of the image is replaced), and the image config becomes /opt/svc/image.env.
# The daemon has copied the archive into an OCI layout (tag svc) and checked its layers; it
# passes the layout, the environment file and the image config in SVC_OCI_LAYOUT,
# SVC_IMAGE_ENV and SVC_IMAGE_CONFIG (with os, source and config).
ROOT=$WORK/bundle/rootfs
[ -d "${SVC_OCI_LAYOUT:-}" ] && [ -f "${SVC_IMAGE_ENV:-}" ] && [ -f "${SVC_IMAGE_CONFIG:-}" ] || { echo "build-image: oci needs SVC_OCI_LAYOUT, SVC_IMAGE_ENV and SVC_IMAGE_CONFIG" >&2; exit 2; }
progress 40 "applying the layers with umoci"
umoci unpack $([ "$(id -u)" -eq 0 ] || echo --rootless) --image "$SVC_OCI_LAYOUT:svc" "$WORK/bundle" > "$WORK/umoci.log" 2>&1 \
  || { echo "build-image: umoci could not unpack the image: $(tail -c 400 "$WORK/umoci.log")" >&2; exit 3; }
# Only /opt/svc is written into the image, and never through a link the image holds.
for d in "$ROOT/opt" "$ROOT/opt/svc"; do
  if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then rm -f "$d"; fi
  mkdir -p "$d"
done
S=$ROOT/opt/svc
rm -rf "${S:?}"/*
mkdir -p "$S"/{bin,lib,modules,agent,acpi/PWRF,state,log}
for d in dev proc sys run tmp; do [ -e "$ROOT/$d" ] || [ -L "$ROOT/$d" ] || mkdir -p "$ROOT/$d"; done
progress 55 "svc init, busybox, node and the agent"
cp /bin/busybox "$S/bin/busybox"
for applet in $("$S/bin/busybox" --list); do [ -e "$S/bin/$applet" ] || ln -s busybox "$S/bin/$applet"; done
private_bin() { # a binary under /opt/svc/bin, its libraries under /opt/svc/lib (run through that loader)
  cp -L "$1" "$S/bin/$(basename "$1")"
  for lib in $(ldd "$1" | awk '/=>/ {print $3} /^\s*\/lib/ {print $1}'); do [ -f "$lib" ] && cp -L "$lib" "$S/lib/"; done
}
private_bin "$(command -v node)"
strip --strip-unneeded "$S/bin/node" 2>/dev/null || true
private_bin /sbin/resize2fs
cp -L /lib64/ld-linux-x86-64.so.2 "$S/lib/"
cp -r "$AGENT/svc-agent.cjs" "$AGENT/node_modules" "$S/agent/"
for p in $(mods_for $BOOT_MODS $ROOT_MODS); do cp "$p" "$S/modules/"; basename "$p"; done > "$S/modules/order"
install -m 0755 "$HERE/oci/init" "$S/init"
install -m 0755 "$HERE/oci/poweroff" "$S/acpi/PWRF/00000080"
# The image config (what `docker run` would use): environment and working directory, as shell.
install -m 0644 "$SVC_IMAGE_ENV" "$S/image.env"
progress 75 "disk image"
make_disk "$ROOT" 1024
AGENT_VERSION=$(node "$AGENT/svc-agent.cjs" --version)
publish "$(node -e '
const c = require(process.argv[1]);
const [id, kver, agent, disk] = process.argv.slice(2);
process.stdout.write(JSON.stringify({
  id, format: 1, os: c.os, description: `imported from ${c.source}`, kernel: "vmlinux", initrd: "initrd.img", disk: "disk.qcow2",
  disk_gb: Number(disk), cmdline: "console=ttyS0 root=/dev/vda rw panic=-1 init=/opt/svc/init",
  ssh_user: "root", agent_ready: true, boot: "kernel", source: c.source, agent_version: agent, kernel_version: kver,
  image_config: c.config, runs_entrypoint: true,
}, null, 2));
' "$SVC_IMAGE_CONFIG" "$(basename "$OUT")" "$KVER" "$AGENT_VERSION" "$DISK_GB")"
