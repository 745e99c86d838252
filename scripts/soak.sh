#!/usr/bin/env bash
# Soak: >= 1,000 concurrent streams through tokentap for a few minutes, loopback only, bounded in time.
# Reports tokentap's RSS and open descriptors (idle, peak, after) and any byte or count mismatch; exits
# non-zero on a mismatch. Usage: scripts/soak.sh [STREAMS] [SECONDS] [extra soak args...]
# PROFILE=release (default) measures the release binary; PROFILE=debug skips the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
streams=${1:-1000}
seconds=${2:-180}
shift $(( $# > 2 ? 2 : $# ))
profile=${PROFILE:-release}
if [[ $profile == release ]]; then
  cargo build --release --bin tokentap
else
  cargo build --bin tokentap
fi
cargo build --example soak
# The load generator holds 2 sockets a stream, tokentap 2 a stream: raise the soft limit if it is low.
ulimit -n "$(( $(ulimit -Hn) < 65536 ? $(ulimit -Hn) : 65536 ))" || true
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {print int($2/1024) " MiB"}' /proc/meminfo), $(uname -sr), $(rustc -V)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
timeout $(( seconds + 300 )) target/debug/examples/soak --tokentap "target/$profile/tokentap" \
  --streams "$streams" --duration "$seconds" "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
