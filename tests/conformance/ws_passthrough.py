"""WebSocket passthrough against a real vLLM, by hand (issue 42; what was run is in docs/forwarding.md's
last paragraph of "WebSocket upgrades"). Each URL gets the same handshake on a raw socket (the answer's
bytes printed, so a refusal can be compared byte for byte), then, if it upgrades, a realtime session
with the `websockets` client: session.update, commit, two 0.5 s appends of a 440 Hz tone, a final
commit, a ping, every delta until transcription.done, close 1000. Run with the conformance suite's
client venv, vLLM direct first, tokentap in front of it second:

    python ws_passthrough.py ws://127.0.0.1:VLLM/v1/realtime ws://127.0.0.1:TOKENTAP/v1/realtime

A text model (the suite's tiny llama) has no realtime route: both answer 403 with the same bytes. A
realtime model (audio_model.py qwen3-asr-realtime) upgrades: the headers (but Date and the Accept of the
random key), the events, the done event's text and usage, the close code are compared.
"""

import asyncio
import base64
import json
import math
import re
import socket
import struct
import sys
from urllib.parse import urlparse

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

MODEL = "tiny-qwen3-asr"


def handshake_bytes(url):
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: WCC/sfgkovMb1lri4DJxag==\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    # Only the head: a server's first frame may come in the same read (vLLM's session.created).
    return got[: got.find(b"\r\n\r\n") + 4] if b"\r\n\r\n" in got else got


def tone(seconds, freq=440.0):
    n = int(16000 * seconds)
    return b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * freq * i / 16000))) for i in range(n))


async def session(url):
    deltas, text = 0, ""
    try:
        ws = await connect(url, open_timeout=10, max_size=None)
    except InvalidStatus as refused:
        return {"refused": refused.response.status_code}
    async with ws:
        headers = {k: v for k, v in ws.response.headers.raw_items() if k.lower() not in ("date", "sec-websocket-accept")}
        events = [json.loads(await ws.recv())["type"]]
        await ws.send(json.dumps({"type": "session.update", "model": MODEL}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        for _ in range(2):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(tone(0.5)).decode()}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit", "final": True}))
        await asyncio.wait_for(await ws.ping(b"x"), 60)
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 180))
            if event["type"] == "transcription.delta":
                deltas, text = deltas + 1, text + event["delta"]
                continue
            events.append(event["type"])
            if event["type"] in ("transcription.done", "error"):
                break
        await ws.close(1000)
    return {"headers": headers, "events": events, "deltas": deltas, "deltas_are_text": text == event.get("text"),
            "done": event, "close": ws.close_code}


async def main(urls):
    heads = [handshake_bytes(u) for u in urls]
    for u, h in zip(urls, heads):
        print(u, h)
    norm = lambda b: re.sub(rb"(Date|Sec-WebSocket-Accept): [^\r]*", rb"\1: X", b, flags=re.I)
    print("handshake answers identical but for Date and Accept:", len({norm(h) for h in heads}) == 1)
    runs = [await session(u) for u in urls]
    for u, r in zip(urls, runs):
        print(u, json.dumps(r)[:400])
    print("sessions identical:", all(r == runs[0] for r in runs))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
