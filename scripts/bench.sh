#!/usr/bin/env bash
# The end-to-end benchmark: tokentap vs a direct connection vs nginx, HAProxy and a plain hyper proxy (the stack's
# floor), in one run, on loopback only.
# Builds the release binary and the harness, installs Debian's nginx and haproxy if missing, pins the scripted
# upstream + load generator to one core and the proxy under test to another, and prints a Markdown table.
#
#   bash scripts/bench.sh                 # the full run (about 14 minutes), table on stdout
#   bash scripts/bench.sh --quick         # a small-scale smoke run (about 2 minutes)
#   BENCH_OUT=docs/benchmark-table.md bash scripts/bench.sh   # also write the table to a file
#
# Extra arguments go to the harness (benches/proxy/main.rs): --reps N, --only lanes,latency,sweep,requests,memory,
# --lane-rounds N (rounds of the field's lanes, benches/proxy/lanes.rs; 7 by default),
# --baseline PATH (a second tokentap binary measured alongside, for before/after comparisons), --logs off
# (tokentap's request log line and nginx's access log off; on by default, nginx's buffered).
set -euo pipefail
cd "$(dirname "$0")/.."

MISSING=()
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then MISSING+=(nginx-light); fi
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then MISSING+=(haproxy); fi
if [ "${#MISSING[@]}" -gt 0 ]; then
    echo "== installing ${MISSING[*]} (Debian's packages)" >&2
    SUDO=()
    if [ "$(id -u)" != 0 ]; then SUDO=(sudo); fi
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${MISSING[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

echo "== building (release)" >&2
cargo build --release --quiet
HARNESS=$(cargo bench --bench proxy --no-run --message-format=json 2>/dev/null \
    | grep '"name":"proxy"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$HARNESS" ] || { echo "bench.sh: could not find the harness binary" >&2; exit 1; }

# One stream holds a socket on each side of the proxy, and 5,000 are held open at once.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

CORES=$(nproc)
PIN=()
PROXY_CPU=()
if [ "$CORES" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    PIN=(taskset -c 0)
    PROXY_CPU=(--proxy-cpu 1)
else
    echo "bench.sh: fewer than 2 cores or no taskset: nothing is pinned" >&2
fi

OUT=()
if [ -n "${BENCH_OUT:-}" ]; then
    OUT=(--out "$BENCH_OUT")
fi

echo "== running on $(lscpu | sed -n 's/^Model name: *//p' | head -1), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# Steal: time the hypervisor gave this VM's vCPUs to someone else (the 8th value of /proc/stat's cpu line,
# in USER_HZ ticks). On a shared host it stretches whatever ran meanwhile; a run with much of it is noise.
steal() { awk '/^cpu / {print $9}' /proc/stat; }
started=$(date +%s)
before=$(steal)
status=0
"${PIN[@]}" "$HARNESS" --tokentap target/release/tokentap --nginx "$NGINX" --haproxy "$HAPROXY" "${PROXY_CPU[@]}" "${OUT[@]}" "$@" || status=$?
ticks=$(getconf CLK_TCK)
echo "== steal during the run: $(( ($(steal) - before) / ticks )) s of CPU time over $(( $(date +%s) - started )) s ($(nproc) vCPUs); load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$status"
