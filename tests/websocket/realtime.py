"""Real realtime clients through tokentap, for tests/realtime.rs: a scripted server on the `websockets`
package and two clients, the `websockets` package's and the openai SDK's realtime client.

`server FIXTURE`: a realtime server on 127.0.0.1:0 (permessage-deflate accepted, as uvicorn does; it pings
every 10 ms); prints its port, then for each connection replays FIXTURE (an `openai-*.jsonl` sequence of
tests/fixtures/realtime): the server's events before the first client event, then after each client
event it receives the server's events that follow it in the fixture, 2 ms apart, until killed; the first
output delta after a client event waits FIRST_OUTPUT (250 ms) instead, a time every TTFT of it must hold
whatever the machine is doing.

`websockets URL FIXTURE`: the `websockets` client (permessage-deflate offered) sends the fixture's client
events, `response.create` fragmented into three frames, reads the server's events after each, closes
with 1000.
`openai URL FIXTURE`: the openai SDK's GA realtime client (`client.realtime.connect`, which offers no
compression) does the same through its own event types.

Each client prints one JSON line: its own TTFT of each response (seconds from just before it sent
`response.create` to its receipt of the first output delta), the events it got, its close code.
"""

import asyncio
import json
import sys
import time

OUTPUT = (
    "response.output_text.delta",
    "response.output_audio.delta",
    "response.output_audio_transcript.delta",
)


def load(fixture):
    with open(fixture) as f:
        return [json.loads(line) for line in f if line.strip()]


def client_events(steps):
    return [s["event"] for s in steps if s["dir"] == "c2s"]


FIRST_OUTPUT = 0.25


async def server(fixture):
    from websockets.asyncio.server import serve

    steps = load(fixture)

    async def session(ws):
        i = 0
        while True:
            first = True
            while i < len(steps) and steps[i]["dir"] == "s2c":
                output = steps[i]["event"].get("type") in OUTPUT
                await asyncio.sleep(FIRST_OUTPUT if output and first else 0.002)
                first = first and not output
                await ws.send(json.dumps(steps[i]["event"]))
                i += 1
            if i >= len(steps):
                break
            await ws.recv()
            i += 1
        await ws.wait_closed()

    async with serve(session, "127.0.0.1", 0, compression="deflate", ping_interval=0.01) as srv:
        print(srv.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


async def with_websockets(url, fixture):
    from websockets.asyncio.client import connect

    steps = load(fixture)
    got, ttfts, asked = [], [], None
    async with connect(url + "?model=gpt-realtime", compression="deflate", open_timeout=5) as ws:
        sent = 0
        for i, step in enumerate(steps):
            if step["dir"] == "c2s":
                text = json.dumps(step["event"])
                if step["event"]["type"] == "response.create":
                    asked = time.monotonic()
                    await ws.send(iter([text[:5], text[5:12], text[12:]]))
                else:
                    await ws.send(text)
                sent += 1
                continue
            event = json.loads(await asyncio.wait_for(ws.recv(), 5))
            if event["type"] in OUTPUT and asked is not None:
                ttfts.append(time.monotonic() - asked)
                asked = None
            got.append(event["type"])
        await ws.close()
        close = ws.close_code
    print(json.dumps({"ttfts": ttfts, "events": got, "sent": sent, "close_code": close}))


async def with_openai(url, fixture):
    from openai import AsyncOpenAI

    steps = load(fixture)
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=url.rsplit("/realtime", 1)[0])
    got, ttfts, asked = [], [], None
    async with client.realtime.connect(model="gpt-realtime") as conn:
        sent = 0
        for step in steps:
            if step["dir"] == "c2s":
                if step["event"]["type"] == "response.create":
                    asked = time.monotonic()
                await conn.send(step["event"])
                sent += 1
                continue
            event = await asyncio.wait_for(conn.recv(), 5)
            if event.type in OUTPUT and asked is not None:
                ttfts.append(time.monotonic() - asked)
                asked = None
            got.append(event.type)
    print(json.dumps({"ttfts": ttfts, "events": got, "sent": sent, "close_code": 1000}))


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "server":
        asyncio.run(server(sys.argv[2]))
    elif role == "websockets":
        asyncio.run(with_websockets(sys.argv[2], sys.argv[3]))
    elif role == "openai":
        asyncio.run(with_openai(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(f"unknown role {role}")
