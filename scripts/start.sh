#!/usr/bin/env bash
# Starts svcd in the foreground. Installs npm dependencies and builds on first use; with the
# QEMU hypervisor it also installs the host packages and builds the guest image when missing.
# Extra arguments go to svcd (for example: --config FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
[ -f dist/src/bin/svcd.js ] && [ -z "$(find src -newer dist/src/bin/svcd.js -name '*.ts' | head -1)" ] || npm run build
if [ -x scripts/ensure-host-deps.sh ] && [ "${SVC_HYPERVISOR:-qemu}" = qemu ] && ! grep -qs 'hypervisor: *fake' "${SVC_CONFIG:-/dev/null}" "$@" 2>/dev/null; then
  bash scripts/ensure-host-deps.sh
fi
exec node dist/src/bin/svcd.js "$@"
