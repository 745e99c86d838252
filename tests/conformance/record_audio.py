"""Records what a running vLLM answers on its audio routes, byte for byte, for tests/fixtures/realtime/ and
tests/fixtures/audio/: the /v1/realtime WebSocket handshake and every frame both ways (through
ws_capture.Relay, with the `websockets` client), and /v1/audio/transcriptions (and /translations) with
`stream=true` as raw HTTP. Runs in the clients' virtualenv (needs `websockets`).

    python record_audio.py --url http://127.0.0.1:PORT --model NAME --out DIR [--prefix P] [--api-key K]
        [--only realtime|http] [--seconds S]

The audio is silence (PCM16, 16 kHz, mono), or a 440 Hz tone with --tone; with random weights the
model writes noise either way.
"""

import argparse
import asyncio
import base64
import io
import json
import math
import os
import socket
import struct
import sys
import time
import uuid
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_capture  # noqa: E402

RATE = 16000


def pcm16(seconds, tone=False):
    n = int(RATE * seconds)
    if not tone:
        return b"\x00\x00" * n
    return b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / RATE))) for i in range(n))


def wav(seconds, tone=False):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm16(seconds, tone))
    return buf.getvalue()


# ---------------------------------------------------------------- realtime


async def session(port, path, script, compression, headers, settle, log, ping_interval=None):
    """Connects through a Relay, runs `script` (a list of ("send", dict|str) / ("wait", seconds) /
    ("until", event type, timeout) steps), closes with 1000 and returns the parsed capture."""
    import websockets

    relay = ws_capture.Relay("127.0.0.1", port)
    url = f"ws://127.0.0.1:{relay.port}{path}"
    received = []
    outcome = {}
    try:
        async with websockets.connect(
            url, compression=compression, additional_headers=headers, max_size=None, open_timeout=30,
            ping_interval=ping_interval,
        ) as ws:
            outcome["status"] = ws.response.status_code

            async def reader():
                try:
                    async for msg in ws:
                        received.append((time.monotonic(), msg))
                except Exception as e:  # noqa: BLE001
                    outcome["reader"] = repr(e)

            rtask = asyncio.create_task(reader())
            for step in script:
                if step[0] == "send":
                    data = step[1] if isinstance(step[1], (str, bytes)) else json.dumps(step[1])
                    await ws.send(data)
                elif step[0] == "wait":
                    await asyncio.sleep(step[1])
                elif step[0] == "until":
                    deadline = time.monotonic() + step[2]
                    while time.monotonic() < deadline:
                        if any(_type(m) == step[1] for _, m in received):
                            break
                        await asyncio.sleep(0.05)
                    else:
                        log(f"  no {step[1]} within {step[2]} s")
            await asyncio.sleep(settle)
            await ws.close(1000)
            outcome["close_code"] = ws.close_code
            outcome["close_reason"] = ws.close_reason
            rtask.cancel()
    except Exception as e:  # noqa: BLE001
        outcome["error"] = f"{type(e).__name__}: {e}"
    await asyncio.sleep(0.5)
    relay.stop()
    cap = ws_capture.parse(relay.chunks)
    cap["outcome"] = outcome
    cap["events"] = [_type(m) for _, m in received]
    return cap


def _type(msg):
    try:
        return json.loads(msg).get("type")
    except Exception:  # noqa: BLE001
        return None


def save_session(cap, out, name, log):
    ws_capture.write_handshake(cap, os.path.join(out, f"{name}.handshake.http"))
    if cap["frames"]:
        ws_capture.write_jsonl(cap["frames"], os.path.join(out, f"{name}.frames.jsonl"))
    log(f"{name}: {cap['response']['start_line'] if cap['response'] else 'no response'}; "
        f"{len(cap['frames'])} frames; events {cap['events']}; {cap['outcome']}")


def append_events(audio, chunk_s):
    step = int(RATE * chunk_s) * 2
    return [("send", {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio[i:i + step]).decode()})
            for i in range(0, len(audio), step)]


def realtime(args, log):
    port = int(args.url.rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    audio = pcm16(args.seconds, args.tone)
    p = args.prefix
    wait = args.wait

    # One utterance: the order vLLM's docstring gives (api_router.py): session.update, commit (starts the
    # generation task), appends, commit final=true (ends the audio stream, so the model flushes).
    full = ([("until", "session.created", 10), ("send", {"type": "session.update", "model": args.model}),
             ("send", {"type": "input_audio_buffer.commit"})]
            + append_events(audio, 0.5)
            + [("send", {"type": "input_audio_buffer.commit", "final": True}),
               ("until", "transcription.done", wait)])
    runs = [
        (f"{p}session", "/v1/realtime", full, "deflate"),
        (f"{p}session-nodeflate", "/v1/realtime", full, None),
        # The model given only in the query: vLLM ignores the query, so the commit is refused.
        (f"{p}query-model-only", f"/v1/realtime?model={args.model}",
         [("until", "session.created", 10), ("send", {"type": "input_audio_buffer.commit"}), ("wait", 1)],
         "deflate"),
        (f"{p}errors", "/v1/realtime",
         [("until", "session.created", 10),
          ("send", {"type": "session.update"}),
          ("send", {"type": "session.update", "model": "no-such-model"}),
          ("send", "not json"),
          ("send", {"type": "response.create"}),
          ("send", {"type": "input_audio_buffer.append", "audio": ""}),
          ("send", {"type": "input_audio_buffer.append", "audio": "%%%"}),
          ("wait", 1.5)],
         "deflate"),
        # A binary message: vLLM's receive_text() raises KeyError('text') (connection.py:70, :82), the
        # handler returns without a close frame and uvicorn drops the TCP connection (the client sees 1006).
        (f"{p}binary-frame", "/v1/realtime",
         [("until", "session.created", 10), ("send", b"\x00\x01binary"), ("wait", 1.5)], None),
    ]
    if args.only_first:
        runs = runs[:1]
    if args.long:
        # Longer audio, appended at twice real time (0.5 s every 0.25 s), two utterances in one session:
        # Qwen3-ASR realtime transcribes 5 s segments as they fill, so deltas come before the final commit.
        long_audio = pcm16(args.long, args.tone)
        paced = []
        for step in append_events(long_audio, 0.5):
            paced += [step, ("wait", 0.25)]
        utterance = ([("send", {"type": "input_audio_buffer.commit"})] + paced
                     + [("send", {"type": "input_audio_buffer.commit", "final": True}),
                        ("until", "transcription.done", wait)])
        second = [("send", {"type": "input_audio_buffer.commit"})] + append_events(audio, 0.5) + [
            ("send", {"type": "input_audio_buffer.commit", "final": True}), ("wait", 8)]
        runs = [(f"{p}session-long", "/v1/realtime",
                 [("until", "session.created", 10), ("send", {"type": "session.update", "model": args.model})]
                 + utterance + second, "deflate")]
    if args.idle:
        # An idle session: uvicorn pings every 20 s (ws_ping_interval), the `websockets` client too
        # (its default ping_interval, 20 s); each side answers the other's ping with a pong.
        runs = [(f"{p}session-idle-pings", "/v1/realtime",
                 [("until", "session.created", 10), ("send", {"type": "session.update", "model": args.model}),
                  ("wait", args.idle)], "deflate")]
    for name, path, script, compression in runs:
        cap = asyncio.run(session(port, path, script, compression, headers, args.settle, log,
                                  ping_interval=20 if args.idle else None))
        save_session(cap, args.out, name, log)
        if cap["response"] and " 101 " not in cap["response"]["start_line"] + " ":
            break  # a refused upgrade: the others would be refused the same way


async def subprotocol_session(port, path, subprotocols, headers):
    """A handshake offering subprotocols (what browsers must do to carry a key), closed at once."""
    from websockets.asyncio.client import connect

    relay = ws_capture.Relay("127.0.0.1", port)
    outcome = {}
    try:
        async with connect(f"ws://127.0.0.1:{relay.port}{path}", subprotocols=subprotocols,
                           additional_headers=headers, ping_interval=None) as ws:
            outcome["status"] = ws.response.status_code
            outcome["subprotocol"] = ws.subprotocol
            outcome["first"] = await ws.recv()
    except Exception as e:  # noqa: BLE001
        outcome["error"] = f"{type(e).__name__}: {e}"
    await asyncio.sleep(0.3)
    relay.stop()
    cap = ws_capture.parse(relay.chunks)
    cap["outcome"], cap["events"] = outcome, []
    return cap


async def held_session(port, model, log):
    """A session left open mid-utterance (commit, one append, no final) until the server closes it:
    stop the server meanwhile (uvicorn's shutdown sends close 1012)."""
    from websockets.asyncio.client import connect

    relay = ws_capture.Relay("127.0.0.1", port)
    outcome = {}
    async with connect(f"ws://127.0.0.1:{relay.port}/v1/realtime", ping_interval=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "session.update", "model": model}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm16(0.5)).decode()}))
        log("session open: stop the server now")
        try:
            async for _ in ws:
                pass
        except Exception as e:  # noqa: BLE001
            outcome["error"] = repr(e)
        outcome["close_code"] = ws.close_code
    await asyncio.sleep(0.5)
    relay.stop()
    cap = ws_capture.parse(relay.chunks)
    cap["outcome"], cap["events"] = outcome, []
    return cap


def auth_probe(args, log):
    """Against a vLLM started with --api-key: its AuthenticationMiddleware guards WebSocket scopes too
    (Authorization: Bearer only); a refused upgrade is an HTTP 401 with a JSON body."""
    port = int(args.url.rsplit(":", 1)[1])
    p = args.prefix
    key = args.auth_probe
    browser = ["realtime", f"openai-insecure-api-key.{key}"]
    for name, subprotocols, headers in [
        (f"{p}auth-missing", None, {}),
        (f"{p}auth-subprotocol-only", browser, {}),
        (f"{p}auth-bearer-with-subprotocols", browser, {"Authorization": f"Bearer {key}"}),
    ]:
        cap = asyncio.run(subprotocol_session(port, "/v1/realtime", subprotocols, headers))
        save_session(cap, args.out, name, log)


# ---------------------------------------------------------------- HTTP


def multipart(fields, file_bytes, boundary):
    out = bytearray()
    for k, v in fields:
        out += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"audio.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()
    out += file_bytes + b"\r\n" + f"--{boundary}--\r\n".encode()
    return bytes(out)


def raw_post(port, path, body, content_type, api_key, timeout=300):
    """Sends one request over a fresh connection and returns (raw response bytes, [(t, n bytes)])."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")
    if api_key:
        head += f"Authorization: Bearer {api_key}\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()
    s.sendall(head.encode() + b"\r\n" + body)
    raw, reads = bytearray(), []
    while data := s.recv(65536):
        reads.append((round(time.monotonic() - t0, 6), len(data)))
        raw += data
    s.close()
    return bytes(raw), reads


def dechunk(raw):
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return head, rest
    body = bytearray()
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2:]
    return head, bytes(body)


def http(args, log):
    port = int(args.url.rsplit(":", 1)[1])
    audio = wav(args.seconds, args.tone)
    p = args.prefix
    runs = [
        (f"{p}transcription-stream-usage", "/v1/audio/transcriptions",
         [("model", args.model), ("stream", "true"), ("stream_include_usage", "true"), ("language", "en")]),
        (f"{p}transcription-stream", "/v1/audio/transcriptions",
         [("model", args.model), ("stream", "true"), ("language", "en")]),
        (f"{p}transcription-stream-continuous", "/v1/audio/transcriptions",
         [("model", args.model), ("stream", "true"), ("stream_include_usage", "true"),
          ("stream_continuous_usage_stats", "true"), ("language", "en")]),
        (f"{p}transcription-json", "/v1/audio/transcriptions", [("model", args.model), ("language", "en")]),
        (f"{p}translation-stream-usage", "/v1/audio/translations",
         [("model", args.model), ("stream", "true"), ("stream_include_usage", "true"), ("language", "en")]),
        # Refusals before the stream starts: a JSON error with its status, never an SSE body.
        (f"{p}transcription-stream-unknown-model", "/v1/audio/transcriptions",
         [("model", "no-such-model"), ("stream", "true"), ("language", "en")]),
        (f"{p}transcription-stream-bad-audio", "/v1/audio/transcriptions",
         [("model", args.model), ("stream", "true"), ("language", "en")], b"RIFF"),
    ]
    if args.only_first:
        runs = runs[:1]
    for name, path, fields, *file_bytes in runs:
        boundary = "tokentap" + uuid.uuid4().hex[:16]
        if args.max_tokens:
            fields = fields + [("max_completion_tokens", str(args.max_tokens))]
        if args.temperature is not None:
            # Random weights give near-equal logits: greedy picks token 0 (<|endoftext|> in the Whisper
            # vocabulary) at once; sampling gives max_tokens tokens of noise.
            fields = fields + [("temperature", str(args.temperature)), ("seed", "1")]
        body = multipart(fields, file_bytes[0] if file_bytes else audio, boundary)
        raw, reads = raw_post(port, path, body, f"multipart/form-data; boundary={boundary}", args.api_key)
        head, payload = dechunk(raw)
        with open(os.path.join(args.out, f"{name}.http"), "wb") as f:
            f.write(raw)
        ext = ".sse" if b"text/event-stream" in head.lower() else ".body"
        with open(os.path.join(args.out, f"{name}{ext}"), "wb") as f:
            f.write(payload)
        with open(os.path.join(args.out, f"{name}.reads.json"), "w") as f:
            json.dump(reads, f)
        status = head.split(b"\r\n", 1)[0].decode()
        log(f"{name}: {status}; {len(payload)} body bytes in {len(reads)} reads")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--api-key")
    ap.add_argument("--only", choices=["realtime", "http"])
    ap.add_argument("--only-first", action="store_true")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--tone", action="store_true")
    ap.add_argument("--wait", type=float, default=120.0)
    ap.add_argument("--settle", type=float, default=0.5)
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--auth-probe", metavar="KEY", help="only the --api-key handshakes (vLLM started with KEY)")
    ap.add_argument("--hold", action="store_true", help="only a session held open until the server closes it")
    ap.add_argument("--idle", type=float, help="record one idle session of this many seconds instead")
    ap.add_argument("--long", type=float, help="record one long paced session of this many seconds instead")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    if args.auth_probe:
        auth_probe(args, log)
        return
    if args.hold:
        port = int(args.url.rsplit(":", 1)[1])
        save_session(asyncio.run(held_session(port, args.model, log)), args.out, f"{args.prefix}server-shutdown", log)
        return
    if args.only in (None, "realtime"):
        realtime(args, log)
    if args.only in (None, "http"):
        http(args, log)


if __name__ == "__main__":
    main()
