#!/usr/bin/env bash
# The one test command (README, .ci/run): install, build, lint, layer check, unit, integration, e2e.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
npm run build
npm run build:agent >/dev/null
npx eslint src test examples bench ui
npx depcruise src --config .dependency-cruiser.cjs --output-type err
bash scripts/ensure-host-deps.sh
[ -x dist/native/svc-splice ] || node scripts/build-native.mjs
npx mocha --reporter dot 'dist/test/unit/**/*.test.js'
bash scripts/ensure-browser.sh
npx mocha --reporter spec --timeout 60000 'dist/test/integration/**/*.test.js'
if [ -d dist/test/e2e ] && ls dist/test/e2e/*.test.js >/dev/null 2>&1; then
  npx mocha --reporter spec --timeout 300000 'dist/test/e2e/**/*.test.js'
fi
