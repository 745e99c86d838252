#!/usr/bin/env bash
# Load-independent cost figures for tokentap (and nginx), for before/after comparisons on a busy machine:
# instructions counted by callgrind over a fixed amount of work, and bytes held per open stream.
#
#   bash scripts/profile.sh cpu   [BINARY]   # callgrind: instructions per short request and per SSE event
#   bash scripts/profile.sh nginx            # the same workloads through nginx (one worker) under callgrind
#   bash scripts/profile.sh heap  [BINARY]   # heaptrack at 1,000 held-open streams: where the bytes are
#   bash scripts/profile.sh rss   [BINARY]   # RSS per held-open stream at 1,000 streams (no profiler)
#
# BINARY defaults to target/release/tokentap (built if missing). The harness (benches/proxy, `--profile`)
# runs the upstream and the load on core 0 and the proxy on core 1; the workloads run between two hooks
# that zero and dump callgrind's counters, so the division by requests and events is exact.
# Outputs stay in $PROFILE_DIR (default /tmp/tokentap-profile); delete it when done (heap files are large).
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-cpu}
BINARY=$(readlink -f "${2:-target/release/tokentap}")
DIR=${PROFILE_DIR:-/tmp/tokentap-profile}
SECS=${PROFILE_SECS:-10}
mkdir -p "$DIR"

if [ "$MODE" != nginx ] && [ ! -x "$BINARY" ]; then
    cargo build --release --quiet
fi
HARNESS=$(cargo bench --bench proxy --no-run --message-format=json 2>/dev/null \
    | grep '"name":"proxy"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$HARNESS" ] || { echo "profile.sh: could not find the harness binary" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

PIN=(taskset -c 0)
PROXY_CPU=(--proxy-cpu 1)
if [ "$(nproc)" -lt 2 ]; then PIN=(); PROXY_CPU=(); fi

# Instructions per request and per event from the two dumps (and the split: a per request + b per event).
report_callgrind() {
    local label=$1 out=$2
    python3 - "$DIR" "$out" "$label" <<'EOF'
import glob, re, sys
d, out, label = sys.argv[1:4]
counts = {}
for line in open(out):
    m = re.match(r"profile (\w+) requests (\d+) events (\d+) errors (\d+)", line)
    if m:
        counts[m[1]] = tuple(int(x) for x in m.groups()[1:])
ir = {}
for f in glob.glob(f"{d}/cg.*.out.*"):
    text = open(f, errors="replace").read()
    m = re.search(r"^desc: Trigger: .*?(\w+)\s*$", text, re.M)
    s = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m and s:
        ir[m[1]] = ir.get(m[1], 0) + int(s[1])
r1, e1, x1 = counts["requests"]
r2, e2, x2 = counts["chunks"]
i1, i2 = ir["requests"], ir["chunks"]
print(f"{label}: short requests: {r1} requests, {e1} events, {x1} errors, {i1} instructions")
print(f"{label}:   {i1 / r1:,.0f} instructions per request (its 11 events included)")
print(f"{label}: paced streams: {r2} requests, {e2} events, {x2} errors, {i2} instructions")
print(f"{label}:   {i2 / e2:,.0f} instructions per event (the stream's own cost shared out)")
det = r1 * e2 - r2 * e1
if det:
    a = (i1 * e2 - i2 * e1) / det
    b = (r1 * i2 - r2 * i1) / det
    print(f"{label}: split: {a:,.0f} per request + {b:,.0f} per event")
EOF
}

case "$MODE" in
cpu | nginx)
    rm -f "$DIR"/cg.*
    WRAP="$DIR/wrap.sh"
    if [ "$MODE" = cpu ]; then
        PROG="$BINARY"
        TARGET=(--tokentap "$WRAP")
    else
        PROG=$(command -v nginx || echo /usr/sbin/nginx)
        TARGET=(--tokentap "$BINARY" --nginx "$WRAP")
    fi
    cat >"$WRAP" <<EOF
#!/bin/sh
echo \$\$ > "$DIR/pid"
exec valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.%p.out" "$PROG" "\$@" 2>>"$DIR/valgrind.log"
EOF
    chmod +x "$WRAP"
    # Zero the proxy's counters (nginx runs without its master here) before a workload, dump them after it.
    PIDS="\$(cat $DIR/pid)"
    export BENCH_PROFILE_START="for p in $PIDS; do callgrind_control -z \$p >/dev/null; done"
    export BENCH_PROFILE_STOP="for p in $PIDS; do callgrind_control -d \$BENCH_PROFILE_LABEL \$p >/dev/null; done"
    nice -n 5 "${PIN[@]}" "$HARNESS" "${TARGET[@]}" "${PROXY_CPU[@]}" --profile "$([ "$MODE" = cpu ] && echo tokentap || echo nginx)" \
        --profile-secs "$SECS" | tee "$DIR/counts.txt"
    sleep 2
    report_callgrind "$MODE" "$DIR/counts.txt"
    echo "callgrind files: $DIR/cg.*  (callgrind_annotate --inclusive=yes FILE | head -60)"
    ;;
heap)
    PRELOAD=$(ls /usr/lib/*/heaptrack/libheaptrack_preload.so | head -1)
    INTERPRET=$(ls /usr/lib/*/heaptrack/libexec/heaptrack_interpret | head -1)
    rm -f "$DIR"/heap.*
    WRAP="$DIR/wrap.sh"
    cat >"$WRAP" <<EOF
#!/bin/sh
LD_PRELOAD="$PRELOAD" DUMP_HEAPTRACK_OUTPUT="$DIR/heap.raw" exec "$BINARY" "\$@"
EOF
    chmod +x "$WRAP"
    nice -n 5 "${PIN[@]}" "$HARNESS" --tokentap "$WRAP" "${PROXY_CPU[@]}" --only memory --memory-steps 1000 | tail -5
    "$INTERPRET" <"$DIR/heap.raw" | zstd -q -c >"$DIR/heap.zst"
    rm -f "$DIR/heap.raw"
    heaptrack_print -f "$DIR/heap.zst" --print-peaks 1 --print-allocators 1 -n 25 -s 0 >"$DIR/heap.txt" 2>&1 || true
    grep -E "^(PEAK|MOST|total|peak)|calls to allocation" "$DIR/heap.txt" | head -20
    echo "heaptrack: $DIR/heap.zst, summary $DIR/heap.txt"
    ;;
rss)
    nice -n 5 "${PIN[@]}" "$HARNESS" --tokentap "$BINARY" "${PROXY_CPU[@]}" --only memory --memory-steps 1000 | grep -A4 '^| proxy'
    ;;
*)
    echo "usage: $0 cpu|nginx|heap|rss [BINARY]" >&2
    exit 2
    ;;
esac
