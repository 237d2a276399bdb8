#!/usr/bin/env bash
# npm run image: installs what the build needs, builds the agent, and builds the default guest
# image into ${SVC_IMAGES_DIR:-${SVC_DATA_DIR:-~/.svc}/images}/default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-host-deps.sh
[ -d node_modules ] || npm ci --no-audit --no-fund
[ -f dist/src/bin/svcd.js ] || npm run build
npm run build:agent >/dev/null
images=${SVC_IMAGES_DIR:-${SVC_DATA_DIR:-$HOME/.svc}/images}
bash image/build-image.sh "$images/default" dist/agent
