#!/usr/bin/env bash
# Builds tokentap from a checkout before the first launch and puts the binary where definition.json
# says it is (bin/tokentap beside this file). The harness runs this as the launch's pre-launch step, so
# no compile happens inside a measurement window.
#
#   TOKENTAP_SRC=/path/to/tokentap [TOKENTAP_COMMIT=<rev>] bash build.sh
#
# TOKENTAP_COMMIT pins what is measured (two runs weeks apart then measure the same code); without it the
# checkout is built as it is and its commit is printed.
set -euo pipefail

GW_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="${TOKENTAP_SRC:?set TOKENTAP_SRC to a tokentap checkout}"
command -v cargo >/dev/null || { echo "build: cargo not found (rustup.rs)"; exit 1; }
if [ -n "${TOKENTAP_COMMIT:-}" ]; then
    git -C "$SRC" checkout -q "$TOKENTAP_COMMIT"
fi
# The release profile as tokentap ships it (jemalloc, the tokenizer feature: the default features).
( cd "$SRC" && cargo build --release --locked )
mkdir -p "$GW_DIR/bin"
cp "$SRC/target/release/tokentap" "$GW_DIR/bin/tokentap"
echo "build: $GW_DIR/bin/tokentap at $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
