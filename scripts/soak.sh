#!/usr/bin/env bash
# Soak: >= 1,000 concurrent streams through tokentap for a few minutes, loopback only, bounded in time.
# Reports tokentap's RSS and open descriptors (idle, peak, after) and any byte or count mismatch; exits
# non-zero on a mismatch. Usage: scripts/soak.sh [STREAMS] [SECONDS] [extra soak args...]
# PROFILE=release (default) measures the release binary; PROFILE=debug skips the release build.
# Every 10 s a line gives t, streams held and completed, RSS, descriptors, where the resident memory is
# (from /proc/PID/smaps: glibc's main arena `brk`, its thread arenas `arenas N/resident of mapped KiB`,
# other anonymous mappings `anon`) and the 1-minute load average.
# Extra soak args go to the load generator (examples/soak.rs): `--env K=V` (repeatable) sets a variable in
# tokentap's environment only, e.g. `--env GLIBC_TUNABLES=glibc.malloc.arena_max=1`; `--config FILE`
# gives tokentap a config file; `--tokens N` and `--gap-ms MS` shape each stream (default 100 tokens
# 100 ms apart); `--malloc-stats` attaches gdb after the drain to print glibc's malloc_stats() (bytes
# held and in use, per arena) before and after malloc_trim(0), and RSS after the trim.
# HEAPTRACK=FILE (default unset) runs tokentap under heaptrack's preload library and writes FILE.zst
# (read it with `heaptrack_print -f FILE.zst`, `-M massif.out` for the live heap over time); it is
# large and heaptrack slows tokentap, so use a shorter run and delete the file when done.
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
extra=()
if [[ -n ${HEAPTRACK:-} ]]; then
  preload=$(find /usr/lib -name libheaptrack_preload.so | head -1)
  interpret=$(find /usr/lib -name heaptrack_interpret | head -1)
  fifo=$(mktemp -u /tmp/soak-heaptrack.XXXXXX)
  mkfifo "$fifo"
  # heaptrack's own pipeline: the preload library writes to the FIFO, the interpreter compresses it.
  ( "$interpret" <"$fifo" | zstd -q -c >"$HEAPTRACK.zst" ) &
  interpreter=$!
  extra=(--env "LD_PRELOAD=$preload" --env "DUMP_HEAPTRACK_OUTPUT=$fifo")
fi
status=0
timeout $(( seconds + 300 )) target/debug/examples/soak --tokentap "target/$profile/tokentap" \
  --streams "$streams" --duration "$seconds" "${extra[@]}" "$@" || status=$?
if [[ -n ${HEAPTRACK:-} ]]; then
  wait "$interpreter" || true
  rm -f "$fifo"
  echo "heaptrack: $HEAPTRACK.zst ($(du -h "$HEAPTRACK.zst" | cut -f1))"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
