#!/usr/bin/env bash
# Builds one of svc's guest images from Debian packages (docs/image.md). Usage:
#   build-image.sh OUT_DIR AGENT_DIR [debian|minimal|oci]   (oci: see oci/build.sh)
# OUT_DIR gets vmlinux, initrd.img, disk.qcow2 (the golden disk) and manifest.json (written last).
# AGENT_DIR is dist/agent (npm run build:agent). Needs what scripts/ensure-host-deps.sh installs.
set -euo pipefail
OUT=$(realpath -m "$1"); AGENT=$(realpath "$2"); KIND=${3:-debian}
HERE=$(cd "$(dirname "$0")" && pwd)
EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
[ -f "$AGENT/svc-agent.cjs" ] || { echo "build-image: $AGENT/svc-agent.cjs missing (npm run build:agent)" >&2; exit 1; }
case "$KIND" in debian|minimal|oci) ;; *) echo "build-image: unknown kind $KIND (debian, minimal or oci)" >&2; exit 2 ;; esac
source "$HERE/lib.sh"
pick_kernel
WORK=$(mktemp -d "${TMPDIR:-/tmp}/svc-image-XXXXXX"); trap 'remove_work "$WORK"' EXIT
progress 2 "kernel $KVER and initramfs"
build_boot
source "$HERE/$KIND/build.sh"
echo "build-image: $OUT ($KIND, kernel $KVER, agent $AGENT_VERSION)" >&2
