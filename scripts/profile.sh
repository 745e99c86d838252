#!/usr/bin/env bash
# Load-independent cost figures for tokentap (and nginx), for before/after comparisons on a busy machine:
# instructions counted by callgrind over a fixed amount of work, system calls and context switches over the
# same work, and bytes held per open stream.
#
#   bash scripts/profile.sh cpu  [BINARY]   # callgrind: instructions per short request and per SSE event
#   bash scripts/profile.sh sys  [BINARY]   # the same workloads, no profiler: read/write system calls and
#                                           # context switches per request and per event (from /proc)
#   bash scripts/profile.sh cpu nginx       # either of those through nginx (one process) instead
#   bash scripts/profile.sh cpu haproxy     # or through HAProxy (one process, one thread)
#   bash scripts/profile.sh cpu hyper       # or through the stack's floor, a plain hyper proxy
#                                           # (benches/proxy/hyper_floor.rs)
#   bash scripts/profile.sh sched [BINARY]  # perf sched: the proxy's wake-ups and context switches per request,
#                                           # per paced event and per connection, by thread (any anchor too)
#   bash scripts/profile.sh trace [BINARY]  # perf trace -s: the proxy's system calls per request, event, connection
#   bash scripts/profile.sh flame [BINARY]  # perf record -g (cpu-clock): folded stacks per workload
#                                           # ($DIR/flame.LABEL.folded; an SVG too where inferno-flamegraph is)
#   bash scripts/profile.sh heap [BINARY]   # heaptrack at 1,000 held-open streams: where the bytes are
#                                           # (BINARY defaults to a build without jemalloc, in target/glibc:
#                                           # heaptrack sees only the allocations that go through malloc)
#   bash scripts/profile.sh rss  [BINARY]   # RSS per held-open stream at 1,000 streams (no profiler)
#   bash scripts/profile.sh micro [HOT_PATH] # callgrind: instructions per iteration of every benches/hot_path.rs
#                                           # function (HOT_PATH: a built hot_path bench binary; built if absent)
#
# BINARY defaults to target/release/tokentap (built if missing). The harness (benches/proxy, `--profile`)
# runs the upstream and the load on core 0 and the proxy on core 1; each workload runs between two hooks
# (zero and dump callgrind's counters, or snapshot /proc), so the divisions by requests and events are exact.
# BENCH_PATH=/v1/unread sends the same load to a path no dialect serves: tokentap forwards it unread, so
# `cpu` on the two paths gives the meter's own part (the difference).
# Outputs stay in $PROFILE_DIR (default /tmp/tokentap-profile); delete it when done (heap files are large).
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-cpu}
if [ "$MODE" = micro ]; then
    DIR=${PROFILE_DIR:-/tmp/tokentap-profile}
    mkdir -p "$DIR"
    BENCH=${2:-$(cargo bench --bench hot_path --no-run --message-format=json 2>/dev/null \
        | grep '"name":"hot_path"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)}
    # Each function runs twice under callgrind, 10 samples of 100 and of 300 iterations; the difference
    # over the 2,000 extra iterations cancels start-up, divan's calibration and the set-up. A dump before
    # each call of the function splits a function with arguments into one part per argument.
    FUNCTIONS=$("$BENCH" --list | sed -n 's/^[├╰]─ //p')
    for f in $FUNCTIONS; do
        # divan filters by substring: skip the other functions whose names contain this one.
        SKIP=()
        for g in $FUNCTIONS; do
            if [ "$g" != "$f" ] && [[ "$g" == *"$f"* ]]; then SKIP+=(--skip "$g"); fi
        done
        for n in 100 300; do
            rm -f "$DIR/micro.$f.$n".*
            nice -n 5 valgrind --tool=callgrind --callgrind-out-file="$DIR/micro.$f.$n" \
                --dump-before="hot_path::$f" "$BENCH" --bench "$f" "${SKIP[@]}" --sample-count 10 \
                --sample-size $n --min-time 0 --max-time 100000 --timer os >/dev/null 2>&1
        done
        python3 - "$DIR" "$f" <<'PY2'
import glob, re, sys
d, f = sys.argv[1:3]
def parts(n):
    files = sorted(glob.glob(f"{d}/micro.{f}.{n}.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    files = files[1:] + [f"{d}/micro.{f}.{n}"]
    return [int(re.search(r"^(?:summary|totals): (\d+)", open(p).read(), re.M)[1]) for p in files]
a, b = parts(100), parts(300)
print(f, " ".join(f"{(y - x) / 2000:,.0f}" for x, y in zip(a, b)))
PY2
    done
    exit 0
fi
NGINX=""
ANCHOR=""
if [ "${2:-}" = nginx ] || [ "${2:-}" = haproxy ]; then
    ANCHOR=$2
    NGINX=$(command -v "$2" || echo "/usr/sbin/$2")
    set -- "$1"
elif [ "${2:-}" = hyper ]; then
    # The stack's floor is the harness itself, run as a plain hyper proxy (set below, once it is built).
    ANCHOR=hyper
    set -- "$1"
fi
BINARY=$(readlink -f "${2:-target/release/tokentap}")
DIR=${PROFILE_DIR:-/tmp/tokentap-profile}
SECS=${PROFILE_SECS:-10}
mkdir -p "$DIR"

if [ ! -x "$BINARY" ]; then
    cargo build --release --quiet
fi
HARNESS=$(cargo bench --bench proxy --no-run --message-format=json 2>/dev/null \
    | grep '"name":"proxy"' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$HARNESS" ] || { echo "profile.sh: could not find the harness binary" >&2; exit 1; }
if [ "$ANCHOR" = hyper ]; then NGINX=$HARNESS; fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

PIN=(taskset -c 0)
PROXY_CPU=(--proxy-cpu 1)
if [ "$(nproc)" -lt 2 ]; then PIN=(); PROXY_CPU=(); fi

# Instructions per request and per event from the two dumps, and the split a per request + b per event.
report_callgrind() {
    python3 - "$DIR" "$2" "$1" <<'PY'
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
if "connections" in counts and "connections" in ir:
    r3, _, x3 = counts["connections"]
    print(f"{label}: TTFT probes (a fresh connection each, closed at the first frame): {r3} probes, {x3} errors")
    print(f"{label}:   {ir['connections'] / max(r3, 1):,.0f} instructions per connection")
PY
}

# System calls and context switches per request (short workload) and per event (paced workload).
report_sys() {
    python3 - "$DIR" "$2" "$1" <<'PY'
import re, sys
d, out, label = sys.argv[1:4]
def read(path):
    return {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+)", open(path).read(), re.M)}
for line in open(out):
    m = re.match(r"profile (\w+) requests (\d+) events (\d+) errors (\d+)", line)
    if not m:
        continue
    w, r, e = m[1], int(m[2]), int(m[3])
    a, b = read(f"{d}/sys.{w}.start"), read(f"{d}/sys.{w}.stop")
    n, unit = {"requests": (r, "request"), "connections": (r, "connection")}.get(w, (e, "event"))
    figures = ", ".join(f"{k} {(b[k] - a[k]) / n:.2f}" for k in a)
    print(f"{label}: {w}: {r} requests, {e} events; per {unit}: {figures}")
PY
}

# perf's figures per request, per paced event and per connection, from the files the hooks left.
report_perf() {
    python3 - "$DIR" "$2" "$1" "$MODE" <<'PY'
import collections, re, subprocess, sys
d, out, label, mode = sys.argv[1:5]
for line in open(out):
    m = re.match(r"profile (\w+) requests (\d+) events (\d+) errors (\d+)", line)
    if not m:
        continue
    w, r, e = m[1], int(m[2]), int(m[3])
    n, unit = {"requests": (r, "request"), "connections": (r, "connection")}.get(w, (e, "event"))
    n = max(n, 1)
    tids = set(open(f"{d}/tids.{w}").read().split())
    if mode == "sched":
        text = subprocess.run(["perf", "sched", "script", "-i", f"{d}/perf.{w}.data"],
                              capture_output=True, text=True).stdout
        wakeups, switches = collections.Counter(), collections.Counter()
        names = {}
        for l in text.splitlines():
            m = re.search(r"sched_wakeup: comm=(.+?) pid=(\d+)", l) or re.search(r"sched_wakeup: (\S+?):(\d+)", l)
            if m and m[2] in tids:
                wakeups[m[2]] += 1
                names[m[2]] = m[1]
            m = re.search(r"sched_switch: prev_comm=(.+?) prev_pid=(\d+)", l) or re.search(r"sched_switch: (\S+?):(\d+) ", l)
            if m and m[2] in tids:
                switches[m[2]] += 1
                names[m[2]] = m[1]
        total_w, total_s = sum(wakeups.values()), sum(switches.values())
        by = ", ".join(f"{names[t]} {wakeups[t] / n:.2f}/{switches[t] / n:.2f}" for t in sorted(names, key=lambda t: -switches[t]))
        print(f"{label}: {w}: per {unit}: wake-ups {total_w / n:.2f}, context switches {total_s / n:.2f} (by thread, wake-ups/switches: {by})")
    elif mode == "trace":
        calls = collections.Counter()
        for l in open(f"{d}/perf.{w}.trace"):
            m = re.match(r"\s+(\w+)\s+(\d+)\s+\d+\s+[\d.]+", l)
            if m:
                calls[m[1]] += int(m[2])
        total = sum(calls.values())
        top = ", ".join(f"{k} {v / n:.2f}" for k, v in calls.most_common(12))
        print(f"{label}: {w}: per {unit}: {total / n:.2f} system calls ({top})")
PY
}

# The proxy profiled (tokentap, an anchor or the floor), started by the harness through a wrapper that
# notes its pid: WRAP, PROG, LABEL and the harness's TARGET arguments.
profiled() {
    WRAP="$DIR/wrap.sh"
    PROG=${NGINX:-$BINARY}
    LABEL=${ANCHOR:-$(basename "$PROG")}
    if [ -n "$NGINX" ]; then
        TARGET=(--tokentap "$BINARY" "--$ANCHOR" "$WRAP" --profile "$ANCHOR")
    else
        TARGET=(--tokentap "$WRAP" --profile tokentap)
    fi
}

case "$MODE" in
sched | trace | flame)
    rm -f "$DIR"/perf.* "$DIR"/tids.* "$DIR"/flame.*
    profiled
    printf '#!/bin/sh\necho $$ > "%s/pid"\nexec "%s" "$@"\n' "$DIR" "$PROG" >"$WRAP"
    chmod +x "$WRAP"
    case "$MODE" in
    sched) RECORD="perf sched record -p \$p -o $DIR/perf.\$BENCH_PROFILE_LABEL.data" ;;
    trace) RECORD="perf trace -s -p \$p -o $DIR/perf.\$BENCH_PROFILE_LABEL.trace" ;;
    flame) RECORD="perf record -e cpu-clock -F 20000 -g -p \$p -o $DIR/perf.\$BENCH_PROFILE_LABEL.data" ;;
    esac
    # perf attaches to the proxy before a workload (a second to be ready) and is stopped (SIGINT) after it.
    export BENCH_PROFILE_START="p=\$(cat $DIR/pid); ls /proc/\$p/task > $DIR/tids.\$BENCH_PROFILE_LABEL; $RECORD >/dev/null 2>&1 & echo \$! > $DIR/perf.pid; sleep 1"
    export BENCH_PROFILE_STOP="kill -INT \$(cat $DIR/perf.pid); sleep 2"
    nice -n 5 "${PIN[@]}" "$HARNESS" "${TARGET[@]}" "${PROXY_CPU[@]}" --profile-secs "$SECS" | tee "$DIR/counts.txt"
    sleep 2
    if [ "$MODE" = flame ]; then
        for w in requests chunks connections; do
            perf script -i "$DIR/perf.$w.data" 2>/dev/null | python3 -c '
import collections, sys
stacks, frames = collections.Counter(), []
for line in sys.stdin:
    line = line.rstrip()
    if not line:
        if frames:
            stacks[";".join(reversed(frames))] += 1
        frames = []
    elif line.startswith(("\t", " ")):
        name = line.split(None, 1)[1].rsplit(" (", 1)[0] if len(line.split(None, 1)) > 1 else "?"
        frames.append(name.split("+0x")[0])
for stack, n in stacks.most_common():
    print(stack, n)
' >"$DIR/flame.$w.folded"
            if command -v inferno-flamegraph >/dev/null; then
                inferno-flamegraph <"$DIR/flame.$w.folded" >"$DIR/flame.$w.svg"
            fi
        done
        echo "folded stacks: $DIR/flame.{requests,chunks,connections}.folded"
    else
        report_perf "$LABEL" "$DIR/counts.txt"
    fi
    ;;
cpu | sys)
    rm -f "$DIR"/cg.* "$DIR"/sys.*
    profiled
    if [ "$MODE" = cpu ]; then
        printf '#!/bin/sh\necho $$ > "%s/pid"\nexec valgrind --tool=callgrind --callgrind-out-file="%s/cg.%%p.out" "%s" "$@" 2>>"%s/valgrind.log"\n' \
            "$DIR" "$DIR" "$PROG" "$DIR" >"$WRAP"
        # Zero the proxy's counters (nginx runs without its master here) before a workload, dump them after.
        export BENCH_PROFILE_START="callgrind_control -z \$(cat $DIR/pid) >/dev/null"
        export BENCH_PROFILE_STOP="callgrind_control -d \$BENCH_PROFILE_LABEL \$(cat $DIR/pid) >/dev/null"
    else
        printf '#!/bin/sh\necho $$ > "%s/pid"\nexec "%s" "$@"\n' "$DIR" "$PROG" >"$WRAP"
        # syscr/syscw (read and write system calls) and the context switches of every thread.
        SNAP="p=\$(cat $DIR/pid); grep -E '^sysc' /proc/\$p/io; cat /proc/\$p/task/*/status | awk '/ctxt_switches/ {s += \$2} END {print \"ctxt: \" s}'"
        export BENCH_PROFILE_START="{ $SNAP; } > $DIR/sys.\$BENCH_PROFILE_LABEL.start"
        export BENCH_PROFILE_STOP="{ $SNAP; } > $DIR/sys.\$BENCH_PROFILE_LABEL.stop"
    fi
    chmod +x "$WRAP"
    nice -n 5 "${PIN[@]}" "$HARNESS" "${TARGET[@]}" "${PROXY_CPU[@]}" --profile-secs "$SECS" | tee "$DIR/counts.txt"
    sleep 2
    if [ "$MODE" = cpu ]; then
        report_callgrind "$LABEL" "$DIR/counts.txt"
        echo "callgrind files: $DIR/cg.*  (callgrind_annotate --inclusive=yes FILE | head -60)"
    else
        report_sys "$LABEL" "$DIR/counts.txt"
    fi
    ;;
heap)
    if [ -z "${2:-}" ]; then
        cargo build --release --quiet --no-default-features --features tokenizer --target-dir target/glibc
        BINARY=$(readlink -f target/glibc/release/tokentap)
    fi
    PRELOAD=$(find /usr/lib -name libheaptrack_preload.so | head -1)
    INTERPRET=$(find /usr/lib -name heaptrack_interpret | head -1)
    rm -f "$DIR"/heap.*
    WRAP="$DIR/wrap.sh"
    printf '#!/bin/sh\nLD_PRELOAD="%s" DUMP_HEAPTRACK_OUTPUT="%s/heap.raw" exec "%s" "$@"\n' \
        "$PRELOAD" "$DIR" "$BINARY" >"$WRAP"
    chmod +x "$WRAP"
    nice -n 5 "${PIN[@]}" "$HARNESS" --tokentap "$WRAP" "${PROXY_CPU[@]}" --only memory --memory-steps 1000 \
        | grep -A2 '^| proxy'
    "$INTERPRET" <"$DIR/heap.raw" | zstd -q -c >"$DIR/heap.zst"
    rm -f "$DIR/heap.raw"
    heaptrack_print -f "$DIR/heap.zst" --print-peaks 1 --print-allocators 0 --print-temporary 0 \
        --print-leaks 0 -n 25 -s 0 >"$DIR/heap.txt" 2>&1 || true
    grep -E "^(peak heap memory|total memory leaked|calls to allocation|temporary memory)" "$DIR/heap.txt" || true
    echo "heaptrack: $DIR/heap.zst, the peak's allocation sites in $DIR/heap.txt"
    ;;
rss)
    nice -n 5 "${PIN[@]}" "$HARNESS" --tokentap "$BINARY" "${PROXY_CPU[@]}" --only memory --memory-steps 1000 \
        | grep -A2 '^| proxy'
    ;;
*)
    echo "usage: $0 cpu|sys|sched|trace|flame|heap|rss|micro [BINARY|nginx|haproxy|hyper]" >&2
    exit 2
    ;;
esac
