"""A real WebSocket peer for tests/websocket.rs, on the `websockets` package (asyncio API, 13+).

`server`: an echo server on 127.0.0.1:0 (permessage-deflate accepted, as uvicorn does); prints its port,
then echoes every message, whole, until killed.
`client URL`: connects through the URL with permessage-deflate offered, sends a fragmented text message,
a binary message, a ping (and awaits its pong), reads each echo back, closes with 1000; prints one JSON
line: the negotiated extension, the echoes, the close codes.
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def server():
    async with serve(echo, "127.0.0.1", 0, compression="deflate") as srv:
        port = srv.sockets[0].getsockname()[1]
        print(port, flush=True)
        await asyncio.Future()


async def client(url):
    async with connect(url, compression="deflate", open_timeout=5, close_timeout=5) as ws:
        extension = ws.response.headers.get("Sec-WebSocket-Extensions")
        # Fragmented: one frame per piece (websockets fragments a message given as an iterator).
        pieces = ["fragmented ", "text " * 200, "message"]
        await ws.send(iter(pieces))
        fragmented = await asyncio.wait_for(ws.recv(), 5)
        binary = bytes(range(256)) * 64
        await ws.send(binary)
        binary_echo = await asyncio.wait_for(ws.recv(), 5)
        pong = await ws.ping(b"are you there")
        latency = await asyncio.wait_for(pong, 5)
        await ws.close(1000, "done")
    print(json.dumps({
        "extension": extension,
        "fragmented_ok": fragmented == "".join(pieces),
        "binary_ok": binary_echo == binary,
        "pong": latency is not None,
        "close_code": ws.close_code,
    }), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        asyncio.run(server())
    else:
        asyncio.run(client(sys.argv[2]))
