"""Captures what the openai Python SDK's realtime clients put on the wire: a scripted WebSocket server
(the `websockets` package) replays one of the openai-*.jsonl event sequences written by
openai_realtime_fixtures.py, the SDK client (GA `client.realtime.connect`, beta
`client.beta.realtime.connect`) plays the client side of the same sequence, and ws_capture.Relay
between them keeps every byte. The client's bytes (handshake, masking, framing, no compression) are the
SDK's own; the server's are the scripted server's (the `websockets` server's 101 and frames carrying
the fixture's events). Runs in the clients' virtualenv (openai[realtime], websockets).

    python record_openai_sdk.py FIXTURES_REALTIME_DIR OUT_DIR
"""

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_capture  # noqa: E402


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


async def scripted_server(lines, select_subprotocol=None):
    """A server that plays the s2c side of `lines`, waiting for each c2s event in turn."""
    from websockets.asyncio.server import serve

    seen = {}

    async def handler(ws):
        seen["path"] = ws.request.path
        seen["headers"] = list(ws.request.headers.raw_items())
        for line in lines:
            if line["dir"] == "s2c":
                await ws.send(json.dumps(line["event"], separators=(",", ":")))
            else:
                msg = json.loads(await ws.recv())
                if msg.get("type") != line["event"]["type"]:
                    raise RuntimeError(f"expected {line['event']['type']}, got {msg.get('type')}")
        await ws.wait_closed()

    kwargs = {}
    if select_subprotocol:
        kwargs["subprotocols"] = [select_subprotocol]
    server = await serve(handler, "127.0.0.1", 0, **kwargs)
    return server, server.sockets[0].getsockname()[1], seen


async def play_sdk(conn, lines):
    for line in lines:
        if line["dir"] == "c2s":
            await conn.send(line["event"])
        else:
            event = await conn.recv()
            if event.type != line["event"]["type"]:
                raise RuntimeError(f"expected {line['event']['type']}, got {event.type}")


async def run_sdk(kind, lines):
    from openai import AsyncOpenAI

    server, port, seen = await scripted_server(lines)
    relay = ws_capture.Relay("127.0.0.1", port)
    # The GA client turns an http:// base_url into ws://; the beta client always switches base_url's
    # scheme to wss:// (resources/beta/realtime/realtime.py, _prepare_url), so plain ws:// needs
    # websocket_base_url.
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{relay.port}/v1", api_key="sk-test-key", max_retries=0,
                         websocket_base_url=None if kind == "ga" else f"ws://127.0.0.1:{relay.port}/v1")
    if kind == "ga":
        manager = client.realtime.connect(model="gpt-realtime")
    else:
        manager = client.beta.realtime.connect(model="gpt-4o-realtime-preview-2025-06-03")
    async with manager as conn:
        await play_sdk(conn, lines)
    await asyncio.sleep(0.3)
    server.close()
    await server.wait_closed()
    relay.stop()
    return ws_capture.parse(relay.chunks)


async def run_browser_style(lines):
    """What a browser sends (it cannot set headers): the key in a subprotocol. Played with the
    `websockets` client offering the subprotocols OpenAI documents for browsers, and permessage-deflate
    as the `websockets` client offers it (browsers offer "permessage-deflate; client_max_window_bits")."""
    from websockets.asyncio.client import connect

    server, port, seen = await scripted_server(lines, select_subprotocol="realtime")
    relay = ws_capture.Relay("127.0.0.1", port)
    async with connect(f"ws://127.0.0.1:{relay.port}/v1/realtime?model=gpt-realtime",
                       subprotocols=["realtime", "openai-insecure-api-key.sk-test-key", "openai-project.proj_123"],
                       ping_interval=None) as ws:
        for line in lines:
            if line["dir"] == "c2s":
                await ws.send(json.dumps(line["event"]))
            else:
                await ws.recv()
    await asyncio.sleep(0.3)
    server.close()
    await server.wait_closed()
    relay.stop()
    return ws_capture.parse(relay.chunks)


def save(cap, out, name):
    ws_capture.write_handshake(cap, os.path.join(out, f"{name}.handshake.http"))
    ws_capture.write_jsonl(cap["frames"], os.path.join(out, f"{name}.frames.jsonl"))
    print(f"{name}: {cap['request']['start_line']} -> {cap['response']['start_line']}; {len(cap['frames'])} frames")


def main(fixtures, out):
    os.makedirs(out, exist_ok=True)
    save(asyncio.run(run_sdk("ga", load(os.path.join(fixtures, "openai-ga-text.jsonl")))), out, "sdk-ga-text")
    save(asyncio.run(run_sdk("beta", load(os.path.join(fixtures, "openai-beta-text.jsonl")))), out, "sdk-beta-text")
    save(asyncio.run(run_browser_style(load(os.path.join(fixtures, "openai-ga-text.jsonl")))), out,
         "browser-style-ga-text")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: record_openai_sdk.py FIXTURES_REALTIME_DIR OUT_DIR")
    main(sys.argv[1], sys.argv[2])
