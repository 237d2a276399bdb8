#!/usr/bin/env bash
# npm run image [debian|minimal]: installs what the build needs, builds the agent, and builds a
# guest image (default: debian, the default image) into ${SVC_IMAGES_DIR:-${SVC_DATA_DIR:-~/.svc}/images}/<kind>.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-host-deps.sh
[ -d node_modules ] || npm ci --no-audit --no-fund
[ -f dist/src/bin/svcd.js ] || npm run build
npm run build:agent >/dev/null
images=${SVC_IMAGES_DIR:-${SVC_DATA_DIR:-$HOME/.svc}/images}
kind=${1:-debian}
tmp="$images/.build-$kind-$$"
trap 'rm -rf "$tmp"' EXIT
bash image/build-image.sh "$tmp" dist/agent "$kind"
rm -rf "${images:?}/$kind" && mv "$tmp" "$images/$kind"
