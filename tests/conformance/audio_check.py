"""Streamed transcription through tokentap against a real vLLM (docs/accuracy.md, "Audio"): the tiny
Whisper (audio_model.py, random weights) served by vLLM 0.32 with the suite's flags, a TCP relay in
front of it that keeps every byte vLLM sends (servers.Relay), tokentap in front of the relay. Each
request is a multipart upload, raw, and one goes through the openai SDK. The checks: the body the
client got is the body vLLM sent, byte for byte; tokentap counts it under `api="transcriptions"` and
the request's model; its TTFT lies between vLLM's own time to first token and the client's time to
the first chunk with text; output and input tokens equal the usage vLLM streamed; a non-streamed
transcription and a refusal count like any JSON answer.

Not part of the conformance suite: a second vLLM (Whisper) adds about 2 minutes to its run on 2 cores.
Run it by hand, with the clients' virtualenv's python, after `cargo build --bin tokentap`:

    ~/.cache/tokentap-conformance/clients/bin/python tests/conformance/audio_check.py \\
        --vllm-python ~/.cache/tokentap-conformance/vllm/bin/python \\
        --tokentap target/debug/tokentap --out target/audio-check

vLLM's virtualenv needs `soundfile` and `scipy` (install.sh installs them).
"""

import argparse
import io
import json
import os
import socket
import subprocess
import sys
import time
import uuid
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from servers import Relay, Tokentap, Vllm, dechunk_response, scrape, settle  # noqa: E402

MODEL = "tiny-whisper"


def wav(seconds):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * int(16000 * seconds))
    return buf.getvalue()


def multipart(fields, audio, boundary):
    out = bytearray()
    for k, v in fields:
        out += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"audio.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()
    return bytes(out + audio + b"\r\n" + f"--{boundary}--\r\n".encode())


def post(port, path, fields, audio):
    """One upload over a fresh connection: (raw answer, seconds to the first read holding text)."""
    boundary = "tokentap" + uuid.uuid4().hex[:16]
    body = multipart(fields, audio, boundary)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    t0 = time.monotonic()
    s.sendall(head.encode() + body)
    raw, first = bytearray(), None
    while data := s.recv(65536):
        raw += data
        if first is None and b'"content":"' in raw and has_text(raw):
            first = time.monotonic() - t0
    s.close()
    return bytes(raw), first


def has_text(raw):
    text = raw.decode(errors="replace")
    at = 0
    while (at := text.find('"content":"', at)) >= 0:
        at += len('"content":"')
        if not text.startswith('"', at):
            return True
    return False


def usage_of(body):
    usage = None
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("data: {"):
            event = json.loads(line[len("data: "):])
            usage = event.get("usage") or usage
    return usage


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vllm-python", required=True)
    p.add_argument("--tokentap", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a.out = os.path.abspath(a.out)
    os.makedirs(a.out, exist_ok=True)
    model_dir = os.path.join(a.out, MODEL)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([a.vllm_python, os.path.join(here, "audio_model.py"), "whisper", model_dir],
                   check=True, stdout=subprocess.DEVNULL)
    results, vllm, tokentap, relay = [], None, None, None

    def check(name, ok, got, want):
        results.append({"check": name, "ok": bool(ok), "got": got, "want": want})
        print(f"{'pass' if ok else 'FAIL'}  {name}: got {got}, want {want}", flush=True)

    try:
        started = time.monotonic()
        vllm = Vllm(a.vllm_python, model_dir, a.out,
                    ["--max-model-len", "448", "--served-model-name", MODEL], name="vllm-whisper")
        print(f"vLLM ready in {time.monotonic() - started:.0f} s", flush=True)
        relay = Relay(vllm.port)
        records = os.path.join(a.out, "records.jsonl")
        tokentap = Tokentap(a.tokentap, relay.url, a.out, a.out, name="tokentap-audio",
                            extra=f"request_log: {{path: {records}}}\n")
        audio = wav(1.0)
        sampled = [("language", "en"), ("temperature", "1.0"), ("seed", "1"), ("max_completion_tokens", "8")]
        cases = [
            ("transcription stream with usage", "/v1/audio/transcriptions",
             [("model", MODEL), ("stream", "true"), ("stream_include_usage", "true")] + sampled),
            ("translation stream with usage", "/v1/audio/translations",
             [("model", MODEL), ("stream", "true"), ("stream_include_usage", "true")] + sampled),
            ("transcription stream, continuous usage", "/v1/audio/transcriptions",
             [("model", MODEL), ("stream", "true"), ("stream_include_usage", "true"),
              ("stream_continuous_usage_stats", "true")] + sampled),
        ]
        for name, path, fields in cases:
            v0, t0 = scrape(vllm.metrics_url), scrape(tokentap.metrics_url)
            mark = relay.mark()
            raw, first = post(tokentap.port, path, fields, audio)
            sent = dechunk_response(relay.since(mark))
            got = dechunk_response(raw)
            v, t = settle(vllm, tokentap)
            dv, dt = v - v0, t - t0
            labels = {"model": MODEL, "api": "transcriptions"}
            check(f"{name}: bytes", got == sent and len(got) > 0, len(got), f"{len(sent)} identical")
            check(f"{name}: counted", dt.get("tokentap_requests_total", status="200", outcome="ok", **labels) == 1,
                  dt.get("tokentap_requests_total", **labels), 1)
            usage = usage_of(got) or {}
            out = dt.get("tokentap_output_tokens_total", **labels)
            check(f"{name}: output tokens = usage", out == usage.get("completion_tokens"), out,
                  usage.get("completion_tokens"))
            inp = dt.get("tokentap_input_tokens_total", **labels)
            check(f"{name}: input tokens = usage", inp == usage.get("prompt_tokens"), inp, usage.get("prompt_tokens"))
            ttft = dt.get("tokentap_time_to_first_token_seconds_sum", **labels)
            theirs = dv.get("vllm:time_to_first_token_seconds_sum")
            check(f"{name}: vLLM's TTFT <= tokentap's <= the client's", theirs <= ttft <= (first or 0),
                  round(ttft, 6), f"[{theirs:.6f}, {first:.6f}]")
        # The openai SDK: its own multipart upload, stream=True.
        import openai
        client = openai.OpenAI(base_url=tokentap.url + "/v1", api_key="none")
        t0 = scrape(tokentap.metrics_url)
        stream = client.audio.transcriptions.create(
            model=MODEL, file=("audio.wav", audio), stream=True, language="en",
            extra_body={"temperature": 1.0, "seed": 1, "max_completion_tokens": 8, "stream_include_usage": True},
        )
        events = list(stream)
        _, t = settle(vllm, tokentap)
        dt = t - t0
        n = dt.get("tokentap_time_to_first_token_seconds_count", model=MODEL, api="transcriptions")
        check("openai SDK stream: one TTFT under the request's model", n == 1, n, f"1 ({len(events)} events)")
        # Not streamed, and refused: like any JSON answer.
        t0 = scrape(tokentap.metrics_url)
        raw, _ = post(tokentap.port, "/v1/audio/transcriptions", [("model", MODEL)] + sampled, audio)
        refused, _ = post(tokentap.port, "/v1/audio/transcriptions",
                          [("model", "no-such-model"), ("stream", "true")] + sampled, audio)
        _, t = settle(vllm, tokentap)
        dt = t - t0
        e2e = dt.get("tokentap_e2e_request_latency_seconds_count", api="transcriptions")
        check("JSON and 404: two E2E, no TTFT", e2e == 2 and
              dt.get("tokentap_time_to_first_token_seconds_count", api="transcriptions") == 0, e2e, 2)
        check("404 passed as vLLM sent it", raw.startswith(b"HTTP/1.1 200") and refused.startswith(b"HTTP/1.1 404"),
              refused.split(b"\r\n", 1)[0].decode(), "HTTP/1.1 404 Not Found")
    finally:
        for process in (tokentap, vllm):
            if process:
                process.stop()
        if relay:
            relay.stop()
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
