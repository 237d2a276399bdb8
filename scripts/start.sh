#!/usr/bin/env bash
# npm start: starts svcd in the foreground. On first use it installs the npm dependencies, builds
# the daemon and the agent, and (for the QEMU hypervisor, the default) installs the host packages;
# the daemon builds the guest image itself when a VM first needs it. Arguments go to svcd.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
if [ ! -f dist/src/bin/svcd.js ] || [ -n "$(find src -name '*.ts' -newer dist/src/bin/svcd.js | head -1)" ]; then npm run build; fi
[ -f dist/agent/svc-agent.cjs ] && [ dist/agent/svc-agent.cjs -nt dist/src/bin/svcd.js ] || npm run build:agent >/dev/null
config=${SVC_CONFIG:-$HOME/.svc/config.yaml}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in --config) config=${args[$((i + 1))]:-} ;; --config=*) config=${args[$i]#--config=} ;; esac
done
hv=${SVC_HYPERVISOR:-$( { sed -n 's/^hypervisor: *\([a-z]*\).*/\1/p' "$config" 2>/dev/null || true; } | head -1)}
[ "${hv:-qemu}" = qemu ] && bash scripts/ensure-host-deps.sh
[ -x dist/native/svc-splice ] || node scripts/build-native.mjs
[ -f dist/code-interpreter/code-interpreter-ts.cjs ] || node scripts/build-code-interpreter.mjs
exec node dist/src/bin/svcd.js "$@"
