#!/usr/bin/env bash
# The one test command (README, .ci/run): install, build, then the tiers: lint and layers, unit,
# integration, e2e. Independent tiers run side by side where the cores allow (the host packages
# beside npm's install and the build; lint beside what is left of them and unit; the e2e images
# built beside integration, which waits on sockets more than it computes, where unit slowed
# six-fold beside them (and e2e not beside integration's last files: the 200-client soak then
# failed copies, and the run was no shorter); unit, integration and e2e files on SVC_E2E_JOBS
# workers, default: 2 on two cores or more). Each tier's time is printed at the end, pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."

LOGS=$(mktemp -d)
RUN_START=$SECONDS
TIMES=()
CURRENT=""
declare -A PIDS=()

summary() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  echo
  echo "tier                         time"
  for t in "${TIMES[@]}"; do echo "$t"; done
  [ -n "$CURRENT" ] && printf '%-28s failed\n' "$CURRENT"
  printf '%-28s %4dm%02ds\n' "total" $(((SECONDS - RUN_START) / 60)) $(((SECONDS - RUN_START) % 60))
  slowest integration
  slowest e2e
  rm -rf "$LOGS"
  exit $rc
}
trap summary EXIT

# slowest TIER: a parallel tier's ten slowest files (test/helpers/root-hooks.ts writes their times).
slowest() {
  [ -s "$LOGS/$1.times" ] || return 0
  echo
  echo "slowest $1 files (s)"
  sort -rn "$LOGS/$1.times" | head -10
}

record() { TIMES+=("$(printf '%-28s %4dm%02ds' "$1" $(($2 / 60)) $(($2 % 60)))"); }

# tier NAME CMD...: runs CMD in the foreground.
tier() {
  local name=$1 start=$SECONDS
  shift
  CURRENT=$name
  "$@"
  CURRENT=""
  record "$name" $((SECONDS - start))
}

# spawn NAME CMD...: runs CMD in the background, its output kept until `settle NAME`.
spawn() {
  local name=$1
  shift
  (
    start=$SECONDS
    rc=0
    "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
    echo $((SECONDS - start)) >"$LOGS/$name.time"
    exit $rc
  ) &
  PIDS[$name]=$!
}

# settle NAME: waits for a spawned tier, prints its output, fails if it failed.
settle() {
  local name=$1 rc=0
  CURRENT=$name
  wait "${PIDS[$name]}" || rc=$?
  unset "PIDS[$name]"
  echo "---- $name"
  cat "$LOGS/$name.log"
  [ $rc -eq 0 ] || return $rc
  CURRENT=""
  record "$name (beside)" "$(cat "$LOGS/$name.time")"
}

lint() {
  npm run --silent lint
  npx depcruise src --config .dependency-cruiser.cjs --output-type err
}

host_deps() {
  bash scripts/ensure-host-deps.sh --tests
  bash scripts/ensure-browser.sh
}

install() {
  [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund
}

build() {
  npm run build
  npm run build:agent >/dev/null
}

jobs=${SVC_E2E_JOBS:-$([ "$(nproc)" -ge 2 ] && echo 2 || echo 1)}

# The host's packages (apt: downloads and dpkg) beside npm's install and the build, which do not
# need them (the base system's C compiler builds the native helpers; without one they are skipped)
spawn "host packages" host_deps
tier install install
tier build build
spawn lint lint
settle "host packages"
# Unit files on the same workers (75 s to 40 s on two cores; each file builds its own world).
tier unit npx mocha --reporter dot $([ "$jobs" -gt 1 ] && echo "--parallel --jobs $jobs") 'dist/test/unit/**/*.test.js'
spawn "e2e images" node dist/test/e2e/prepare.js
# Longest first, as for e2e below (seconds in a CI run of 2026-11-29 07:30).
ordered() {
  local dir=$1 prefix=$2
  shift 2
  local out=() f
  for f in "$@"; do [ -f "$dir/$prefix$f.test.js" ] && out+=("$dir/$prefix$f.test.js"); done
  for f in "$dir"/*.test.js; do
    case " ${out[*]} " in *" $f "*) ;; *) out+=("$f") ;; esac
  done
  printf '%s\n' "${out[@]}"
}
if [ "$jobs" -gt 1 ]; then
  mapfile -t files < <(ordered dist/test/integration "" soak cli cluster e2b fuzz crash-matrix dashboard agent processes client)
  tier "integration ($jobs workers)" env SVC_FILE_TIMES="$LOGS/integration.times" npx mocha --reporter spec --timeout 60000 --parallel --jobs "$jobs" "${files[@]}"
else
  tier integration npx mocha --reporter spec --timeout 60000 'dist/test/integration/**/*.test.js'
fi
settle lint
settle "e2e images"
if ls dist/test/e2e/*.test.js >/dev/null 2>&1; then
  if [ "$jobs" -gt 1 ]; then
    # Longest first, so the workers end close together (mocha hands files out in the order given):
    # by their seconds in the CI run of 2026-12-07 03:58 (processes' printer no longer forks), the rest by name.
    mapfile -t files < <(ordered dist/test/e2e qemu- debian import-disk mounts processes templates daemon forks crash contract e2b import-oci)
    tier "e2e ($jobs workers)" env SVC_FILE_TIMES="$LOGS/e2e.times" npx mocha --reporter spec --timeout 300000 --parallel --jobs "$jobs" "${files[@]}"
  else
    tier e2e npx mocha --reporter spec --timeout 300000 'dist/test/e2e/**/*.test.js'
  fi
fi
