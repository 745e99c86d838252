"""TLS on tokentap's listener (listen_tls:) in front of the real vLLM: the openai SDK (httpx, HTTP/1.1)
and curl over TLS with h2 and with HTTP/1.1, the very same requests sent through the plain tokentap too.
The clients trust tests/fixtures/tls/ca.pem. Checked: each client got the same text over TLS as over plain
TCP (temperature 0), curl spoke the HTTP version it asked for, and the TLS tokentap's counts (requests, prompt
and generation tokens, TTFT observations, outcomes) equal vLLM's for those requests and the plain tokentap's
for the same requests; no handshake failed."""

import json
import os
import subprocess

import httpx
import openai

from servers import MODEL, Tokentap, settle

TLS_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "fixtures", "tls"))
MESSAGES = [{"role": "user", "content": "Name three rivers of Europe."}]


def _sdk(base_url, verify):
    """Streamed with usage, and not streamed, through the openai SDK; the texts."""
    http = httpx.Client(verify=verify, timeout=120)
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, http_client=http)
    streamed = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True})
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0)
    http.close()
    return [text, whole.choices[0].message.content]


def _curl(base_url, version, ca):
    """A streamed request by curl with `version` (--http2, --http1.1): its text and the version it spoke."""
    body = json.dumps(dict(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stream=True,
                           stream_options={"include_usage": True}))
    argv = ["curl", "-sS", "--no-buffer", version, "-w", "\n%{http_version}", "-H", "content-type: application/json",
            "-d", body, base_url + "/v1/chat/completions"]
    if ca:
        argv[1:1] = ["--cacert", ca]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.splitlines()
    text = ""
    for line in lines[:-1]:
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            text += "".join(c["delta"].get("content") or "" for c in event.get("choices", []))
    return text, lines[-1]


def _run(base_url, ca):
    texts = _sdk(base_url, ca if ca else True)
    spoken = []
    # Over TCP, h2 with prior knowledge (h2c); over TLS, h2 by ALPN.
    for version in ("--http2" if ca else "--http2-prior-knowledge", "--http1.1"):
        text, http_version = _curl(base_url, version, ca)
        texts.append(text)
        spoken.append(http_version)
    return texts, spoken


COUNTED = [
    ("requests", "tokentap_requests_total", {}),
    ("requests ok, 200", "tokentap_requests_total", {"outcome": "ok", "status": "200"}),
    ("prompt tokens", "tokentap_input_tokens_total", {}),
    ("generation tokens", "tokentap_output_tokens_total", {}),
    ("TTFT observations", "tokentap_time_to_first_token_seconds_count", {}),
]


def tls_listener(suite, binary, tokenizer_root, out):
    group = "TLS listener (SDK, curl h2, h1)"
    cert, key, ca = (os.path.join(TLS_DIR, n) for n in ("server.pem", "server.key", "ca.pem"))
    tls = Tokentap(binary, suite.vllm.url, tokenizer_root, out, name="tokentap-tls",
                   extra=f"listen_tls: {{cert_file: {cert}, key_file: {key}}}\n")
    try:
        (plain_texts, plain_spoken), v_plain, t_plain = suite.phase(lambda: _run(suite.tokentap.url, None))
        v0, t0 = settle(suite.vllm, tls)
        texts, spoken = _run(f"https://localhost:{tls.port}", ca)
        v1, t1 = settle(suite.vllm, tls)
        v, t = v1 - v0, t1 - t0
        suite.exact(group, "curl's HTTP versions over TLS", " ".join(spoken), "2 1.1")
        suite.exact(group, "curl's HTTP versions over TCP", " ".join(plain_spoken), "2 1.1")
        for name, got, want in zip(("SDK stream", "SDK whole", "curl h2", "curl h1.1"), texts, plain_texts):
            suite.check(group, f"{name}: text = over TCP", f"{len(got)} chars", f"{len(want)} chars",
                        got == want and got != "")
        suite.counts(group, v, t)
        for name, metric, labels in COUNTED:
            suite.exact(group, f"{name} = over TCP", t.get(metric, **labels), t_plain.get(metric, **labels))
        suite.exact(group, "handshakes failed", t1.get("tokentap_tls_handshake_failures_total"), 0)
    finally:
        tls.stop()
