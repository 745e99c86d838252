"""Records real vLLM streams into tests/fixtures/vllm/ for the dialect fixture tests (src/dialect/fixtures.rs,
tests/dialects.rs), which replay them at every split point. Each file is the response body exactly as vLLM
sent it (chunked transfer coding undone), requested directly from vLLM, temperature 0 (1 with a seed for n=2).

    python record_fixtures.py --vllm-python PY --model-dir DIR     # starts its own vLLM
    python record_fixtures.py --reuse-vllm http://127.0.0.1:PORT   # or uses one started by hand
"""

import argparse
import os
import sys
import tempfile

import clients
from conformance import post
from servers import MODEL, Reused, Vllm

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "vllm")
TOKENS = 6
USAGE = {"stream_options": {"include_usage": True}}
CHAT = dict(messages=clients.MESSAGES, max_tokens=TOKENS, seed=1)

STREAMS = [
    ("chat-stream.sse", "/v1/chat/completions", dict(CHAT, temperature=0)),
    ("chat-stream-usage.sse", "/v1/chat/completions", dict(CHAT, temperature=0, **USAGE)),
    ("chat-stream-n2-usage.sse", "/v1/chat/completions", dict(CHAT, n=2, temperature=1.0, **USAGE)),
    ("completions-stream-usage.sse", "/v1/completions",
     dict(prompt=clients.PROMPT, max_tokens=TOKENS, seed=1, temperature=0, **USAGE)),
    ("responses-stream.sse", "/v1/responses", dict(input=clients.PROMPT, max_output_tokens=TOKENS, temperature=0)),
    ("messages-stream.sse", "/v1/messages", dict(messages=clients.MESSAGES, max_tokens=TOKENS, temperature=0)),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vllm-python")
    p.add_argument("--model-dir")
    p.add_argument("--reuse-vllm", metavar="URL")
    a = p.parse_args()
    vllm = Reused(a.reuse_vllm) if a.reuse_vllm else Vllm(a.vllm_python, a.model_dir, tempfile.mkdtemp())
    try:
        os.makedirs(OUT, exist_ok=True)
        for name, path, body in STREAMS:
            status, data = post(vllm.port, path, dict(model=MODEL, stream=True, **body))
            if status != 200:
                raise SystemExit(f"{name}: {status} {data[:200]!r}")
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(data)
            print(f"{name}: {len(data)} bytes")
    finally:
        vllm.stop()


if __name__ == "__main__":
    sys.exit(main())
