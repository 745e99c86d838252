#!/usr/bin/env bash
# The live page in a real headless browser (live.mjs): Debian's chromium, driven over DevTools by
# playwright-core (npm, pinned in package-lock.json; it downloads no browser). Starts tokentap (debug
# build) with a scripted upstream and a burst of requests, checks the page's figures against /metrics and
# the console for errors, and writes screenshots to target/browser/.
#   bash tests/browser/run.sh      # from anywhere; exits non-zero if a check failed
# Needs: chromium (apt-get install chromium), node and npm (the machine's).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v chromium >/dev/null 2>&1; then
  echo "chromium is not installed: apt-get install -y chromium" >&2
  exit 1
fi
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
cargo build --bin tokentap
timeout 200 node tests/browser/live.mjs
