#!/usr/bin/env bash
# The conformance suite: a real vLLM (CPU, dummy weights) with tokentap in front, driven by the real
# clients, every figure checked against vLLM's own /metrics and what the clients saw (see
# docs/accuracy.md). Installs what it needs once (install.sh, ~8 GB under $CONFORMANCE_HOME), then
# runs in 2-5 minutes on 2 cores; the checks are bounded to 20 minutes.
#   bash tests/conformance/run.sh      # from anywhere; exits non-zero if any check failed
#   bash tests/conformance/run.sh --capture [--record-fixture tests/fixtures/capture]
#                                      # the same checks with `tokentap capture` beside vLLM instead of in
#                                      # front of it (root: an AF_PACKET socket on lo; capture.py)
# Results: target/conformance/ (results.json, table.md, the servers' and aiperf's logs), or
# target/conformance-capture/.
set -euo pipefail
cd "$(dirname "$0")/../.."
home="${CONFORMANCE_HOME:-$HOME/.cache/tokentap-conformance}"
bash tests/conformance/install.sh
cargo build --bin tokentap
script=conformance.py
out=target/conformance
if [[ "${1:-}" == "--capture" ]]; then
  script=capture.py
  out=target/conformance-capture
  shift
fi
rm -rf "$out"
mkdir -p "$out"
# The tiny model lives in a directory of its own: its parent is the tokenizer_dirs root tokentap searches.
models="$(mktemp -d)"
trap 'rm -rf "$models"' EXIT
py="$home/clients/bin/python"
"$py" tests/conformance/model.py "$models/tiny-llama" >/dev/null
status=0
timeout 1200 "$py" "tests/conformance/$script" --vllm-python "$home/vllm/bin/python" \
  --tokentap target/debug/tokentap --model-dir "$models/tiny-llama" --out "$out" "$@" || status=$?
if [[ -f "$out/results.json" ]]; then
  "$py" tests/conformance/report.py "$out/results.json" >"$out/table.md"
  echo "table: $out/table.md (docs/accuracy.md shows the last recorded run)"
fi
exit "$status"
