"""Records real llama-cpp-python server streams into tests/fixtures/llamacpp-python/: the conformance suite's
tiny model (model.py) written as a GGUF with random weights (the `gguf` package), served by
`python -m llama_cpp.server`, its OpenAI routes requested directly, each body kept exactly as sent (chunked
transfer coding undone). Not part of the suite: llama-cpp-python builds llama.cpp from source (about 5
minutes), so it lives in a virtualenv of its own:

    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF" VENV/bin/pip install "llama-cpp-python[server]" gguf numpy
    VENV/bin/python record_llamacpp.py --model-dir DIR     # DIR from model.py
"""

import argparse
import json
import os
import sys
import tempfile

import http.client

import numpy as np

from servers import MODEL, Process, free_port

# The suite's prompt (clients.py); that module needs the SDKs, which this virtualenv does not have.
PROMPT = "Explain the terms of this licence in a few words."
MESSAGES = [{"role": "user", "content": PROMPT}]

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "llamacpp-python")
HIDDEN, LAYERS, HEADS, FFN = 128, 2, 2, 256

STREAMS = [
    ("chat-stream.sse", "/v1/chat/completions", dict(messages=MESSAGES)),
    ("completions-stream.sse", "/v1/completions", dict(prompt=PROMPT)),
]


def write_gguf(model_dir, path):
    import gguf

    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    tokens = [""] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    special = {t["id"] for t in tok["added_tokens"]}
    merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
    with open(os.path.join(model_dir, "chat_template.jinja")) as f:
        template = f.read()

    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_chat_template(template)

    rng = np.random.default_rng(1)

    def tensor(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def ones(name):
        w.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))

    tensor("token_embd.weight", len(tokens), HIDDEN)
    ones("output_norm.weight")
    tensor("output.weight", len(tokens), HIDDEN)
    for b in range(LAYERS):
        ones(f"blk.{b}.attn_norm.weight")
        ones(f"blk.{b}.ffn_norm.weight")
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{b}.{t}.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{b}.ffn_gate.weight", FFN, HIDDEN)
        tensor(f"blk.{b}.ffn_up.weight", FFN, HIDDEN)
        tensor(f"blk.{b}.ffn_down.weight", HIDDEN, FFN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    a = p.parse_args()
    work = tempfile.mkdtemp()
    gguf_path = os.path.join(work, "tiny-llama.gguf")
    write_gguf(a.model_dir, gguf_path)
    port = free_port()
    server = Process(
        "llama-cpp-python",
        [sys.executable, "-m", "llama_cpp.server", "--model", gguf_path, "--model_alias", MODEL,
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "512", "--seed", "1"],
        dict(os.environ), os.path.join(work, "server.log"),
    )
    try:
        server.wait_ready(f"http://127.0.0.1:{port}/v1/models", timeout=120)
        os.makedirs(OUT, exist_ok=True)
        for name, path, body in STREAMS:
            body = dict(model=MODEL, max_tokens=6, temperature=0, seed=1, stream=True, **body)
            status, data = post(port, path, body)
            if status != 200:
                raise SystemExit(f"{name}: {status} {data[:200]!r}")
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(data)
            print(f"{name}: {len(data)} bytes")
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
