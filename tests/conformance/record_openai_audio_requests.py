"""The openai SDK's audio requests (streamed transcription, speech with stream_format "sse") as they cross
the wire, captured by a one-shot raw socket server that answers a canned SSE body.

    python record_openai_audio_requests.py OUT_DIR      # clients' virtualenv
"""
import socket, threading, sys
from openai import OpenAI
def serve_once(lst, resp):
    srv = socket.create_server(("127.0.0.1", 0)); port = srv.getsockname()[1]
    def run():
        c, _ = srv.accept(); buf = b""
        while b"\r\n\r\n" not in buf: buf += c.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
        while len(body) < n: body += c.recv(65536)
        lst.append(head + b"\r\n\r\n" + body); c.sendall(resp); c.close(); srv.close()
    threading.Thread(target=run, daemon=True).start(); return port
out = sys.argv[1]
sse_t = b'data: {"type":"transcript.text.done","text":"","usage":{"type":"tokens","input_tokens":1,"output_tokens":0,"total_tokens":1}}\n\n'
sse_s = b'data: {"type":"speech.audio.done","usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}\n\n'
for name, body, call in [
    ("openai-sdk-transcription-stream.request.http", sse_t, lambda c: list(c.audio.transcriptions.create(model="gpt-4o-transcribe", file=("audio.wav", b"RIFF\x24\x00\x00\x00WAVE"), stream=True, language="en"))),
    ("openai-sdk-speech-sse.request.http", sse_s, lambda c: list(c.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="alloy", input="Hello.", stream_format="sse").__enter__().iter_bytes())),
]:
    got = []
    port = serve_once(got, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body)
    c = OpenAI(api_key="sk-test-key", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    call(c)
    open(f"{out}/{name}", "wb").write(got[0]); print(name, len(got[0]))
