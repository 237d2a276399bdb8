#!/usr/bin/env bash
# Installs Debian's chromium for the dashboard's browser tests when missing (no browser download
# from npm: puppeteer-core drives this one). Only the tests need it; the daemon does not.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
echo "svc: installing chromium for the dashboard tests" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
