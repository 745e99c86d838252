"""Wire captures of WebSocket sessions for fixtures: a TCP relay that keeps every byte both ways, and a
parser that cuts the two byte streams into the HTTP handshake and RFC 6455 frames. Standard library only
(zlib for permessage-deflate), so it runs in any of the suite's virtualenvs.

    relay = Relay("127.0.0.1", upstream_port)   # point the client at relay.port
    ...                                          # run the client
    relay.stop()
    capture = parse(relay.chunks)                # {"request": ..., "response": ..., "frames": [...]}
    write_jsonl(capture["frames"], path)

A frame line: {"dir": "c2s"|"s2c", "t": seconds since the first byte, "fin", "rsv1", "opcode" (name),
"masked", "len" (payload length on the wire), "raw" (hex of the whole frame as it crossed the wire,
mask and all), "payload" (the message text for a text frame, unmasked and inflated; for close frames
"code"/"reason"; hex otherwise), "message_end" (true on the frame that completes a message)}.
"""

import json
import socket
import struct
import threading
import time
import zlib

OPCODES = {0x0: "continuation", 0x1: "text", 0x2: "binary", 0x8: "close", 0x9: "ping", 0xA: "pong"}


class Relay:
    """Accepts one client at a time and relays to 127.0.0.1:upstream_port, keeping (dir, t, bytes)."""

    def __init__(self, host, upstream_port):
        self.upstream = (host, upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.chunks = []  # (dir, monotonic time, bytes)
        self.lock = threading.Lock()
        self.threads = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for src, dst, d in ((client, upstream, "c2s"), (upstream, client, "s2c")):
                t = threading.Thread(target=self._pump, args=(src, dst, d), daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src, dst, d):
        try:
            while data := src.recv(65536):
                with self.lock:
                    self.chunks.append((d, time.monotonic(), data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # Half-close: pass the FIN on, keep the other direction open.
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def stop(self, wait=2.0):
        self.listener.close()
        for t in self.threads:
            t.join(wait)


def _head(buf):
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None, buf
    return buf[: end + 4], buf[end + 4 :]


def parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if line]
    return {"start_line": lines[0], "headers": headers, "raw": head.decode("latin-1")}


def negotiated_deflate(response_headers):
    """The permessage-deflate parameters the server accepted, or None."""
    for name, value in response_headers:
        if name.lower() != "sec-websocket-extensions":
            continue
        for ext in value.split(","):
            parts = [p.strip() for p in ext.split(";")]
            if parts[0] == "permessage-deflate":
                params = {}
                for p in parts[1:]:
                    k, _, v = p.partition("=")
                    params[k.strip()] = v.strip().strip('"') or True
                return params
    return None


def _frames(buf, times):
    """Yields (offset, fin, rsv1, opcode, masked, payload_unmasked, raw) from a byte stream."""
    pos = 0
    while pos + 2 <= len(buf):
        b0, b1 = buf[pos], buf[pos + 1]
        n = b1 & 0x7F
        hdr = 2
        if n == 126:
            if pos + 4 > len(buf):
                return
            n = struct.unpack(">H", buf[pos + 2 : pos + 4])[0]
            hdr = 4
        elif n == 127:
            if pos + 10 > len(buf):
                return
            n = struct.unpack(">Q", buf[pos + 2 : pos + 10])[0]
            hdr = 10
        masked = bool(b1 & 0x80)
        key = b""
        if masked:
            key = buf[pos + hdr : pos + hdr + 4]
            hdr += 4
        if pos + hdr + n > len(buf):
            return
        payload = bytes(buf[pos + hdr : pos + hdr + n])
        if masked:
            payload = bytes(c ^ key[i % 4] for i, c in enumerate(payload))
        yield pos, bool(b0 & 0x80), bool(b0 & 0x40), b0 & 0x0F, masked, payload, bytes(buf[pos : pos + hdr + n])
        pos += hdr + n


def parse(chunks):
    streams = {"c2s": bytearray(), "s2c": bytearray()}
    offsets = {"c2s": [], "s2c": []}  # (offset in stream, time) of each chunk
    t0 = chunks[0][1] if chunks else 0.0
    for d, t, data in chunks:
        offsets[d].append((len(streams[d]), t - t0))
        streams[d] += data
    req_head, c_rest = _head(bytes(streams["c2s"]))
    resp_head, s_rest = _head(bytes(streams["s2c"]))
    out = {"request": parse_head(req_head) if req_head else None,
           "response": parse_head(resp_head) if resp_head else None, "frames": []}
    if out["response"] is None or " 101 " not in out["response"]["start_line"] + " ":
        out["response_body"] = s_rest.decode("latin-1")
        return out
    deflate = negotiated_deflate(out["response"]["headers"])
    frames = []
    for d, rest, head in (("c2s", c_rest, req_head), ("s2c", s_rest, resp_head)):
        base = len(head)
        # Context takeover: one inflater per direction unless the peer's no_context_takeover was agreed.
        no_takeover = bool(deflate) and (
            ("client_no_context_takeover" in deflate) if d == "c2s" else ("server_no_context_takeover" in deflate)
        )
        inflater = zlib.decompressobj(-15)
        msg, msg_compressed = bytearray(), False
        for off, fin, rsv1, op, masked, payload, raw in _frames(rest, None):
            abs_off = base + off
            t = max((tt for o, tt in offsets[d] if o <= abs_off), default=0.0)
            line = {"dir": d, "t": round(t, 6), "fin": fin, "rsv1": rsv1, "opcode": OPCODES.get(op, hex(op)),
                    "masked": masked, "len": len(payload), "raw": raw.hex()}
            if op >= 0x8:  # control
                if op == 0x8 and len(payload) >= 2:
                    line["code"] = struct.unpack(">H", payload[:2])[0]
                    line["reason"] = payload[2:].decode("utf-8", "replace")
                else:
                    line["payload"] = payload.hex()
                line["message_end"] = True
            else:
                if op != 0x0:
                    msg, msg_compressed, msg_op = bytearray(), rsv1, op
                msg += payload
                line["message_end"] = fin
                if fin:
                    data = bytes(msg)
                    if msg_compressed:
                        data = inflater.decompress(data + b"\x00\x00\xff\xff")
                        if no_takeover:
                            inflater = zlib.decompressobj(-15)
                    line["message_len"] = len(data)
                    line["payload"] = data.decode("utf-8", "replace") if msg_op == 0x1 else data.hex()
            frames.append(line)
    frames.sort(key=lambda f: f["t"])
    out["frames"] = frames
    return out


def write_jsonl(lines, path):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def write_handshake(capture, path):
    """The handshake as it crossed the wire: the request head, a blank line, the response head (and a
    refusal's body)."""
    with open(path, "w", newline="") as f:
        f.write(capture["request"]["raw"] if capture["request"] else "")
        f.write(capture["response"]["raw"] if capture["response"] else "")
        f.write(capture.get("response_body", ""))
