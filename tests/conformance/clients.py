"""The real clients the suite drives: the openai SDK (sync and async), the anthropic SDK, and a raw HTTP/1.1
client that leaves in the middle of a stream. Each call returns what the client saw: whether it streamed,
its own TTFT (time to the first chunk carrying text) and how many chunks carried text."""

import asyncio
import json
import socket
import time

import anthropic
import openai

from servers import MODEL

PROMPT = "Explain the terms of this licence in a few words."
MESSAGES = [{"role": "user", "content": PROMPT}]
MAX_TOKENS = 24
SAMPLING = dict(temperature=0, seed=1)
# vLLM refuses n > 1 with greedy sampling (temperature 0); top_k 1 is greedy all the same, so the text
# repeats run to run and is text a tokenizer gives back token for token (random tokens are not: see
# random_text in conformance.py).
N2 = dict(temperature=1.0, extra_body={"top_k": 1})
N2_JSON = dict(temperature=1.0, top_k=1)


class Seen:
    def __init__(self, name, stream, ttft=None, outputs=0):
        self.name, self.stream, self.ttft, self.outputs = name, stream, ttft, outputs


def _chat_text(chunk):
    return "".join(c.delta.content or "" for c in chunk.choices if c.delta)


def _completion_text(chunk):
    return "".join(c.text or "" for c in chunk.choices)


def _response_text(event):
    return getattr(event, "delta", "") if event.type.endswith(".delta") else ""


def _timed(name, start, items, text_of):
    ttft, outputs = None, 0
    for item in items:
        if text_of(item):
            outputs += 1
            if ttft is None:
                ttft = time.monotonic() - start
    return Seen(name, True, ttft, outputs)


async def _atimed(name, start, items, text_of):
    ttft, outputs = None, 0
    async for item in items:
        if text_of(item):
            outputs += 1
            if ttft is None:
                ttft = time.monotonic() - start
    return Seen(name, True, ttft, outputs)


def openai_calls(usage, n=1, nonstream=True, responses=True):
    """(name, method path, kwargs, text_of) for every OpenAI call of one group. `usage` adds
    stream_options.include_usage to the chat and completions streams; `n` > 1 asks for several choices
    (chat and completions only: the Responses API has one answer)."""
    opts = {"stream_options": {"include_usage": True}} if usage else {}
    several = dict(n=n, **N2) if n > 1 else {}
    tag = ("usage" if usage else "no usage") + (f", n={n}" if n > 1 else "")
    calls = [
        (f"chat stream, {tag}", "chat.completions", dict(messages=MESSAGES, stream=True, **several, **opts), _chat_text),
        (f"completions stream, {tag}", "completions", dict(prompt=PROMPT, stream=True, **several, **opts), _completion_text),
    ]
    if nonstream:
        calls += [
            (f"chat{', n=%d' % n if n > 1 else ''}", "chat.completions", dict(messages=MESSAGES, **several), None),
            (f"completions{', n=%d' % n if n > 1 else ''}", "completions", dict(prompt=PROMPT, **several), None),
        ]
    if responses and n == 1:
        calls += [
            ("responses", "responses", dict(input=PROMPT), None),
            ("responses stream", "responses", dict(input=PROMPT, stream=True), _response_text),
        ]
    return calls


def _kwargs(path, kwargs):
    limit = {"max_output_tokens": MAX_TOKENS} if path == "responses" else {"max_tokens": MAX_TOKENS}
    extra = {} if path == "responses" else {"seed": SAMPLING["seed"]}
    return dict(dict(model=MODEL, temperature=0, **limit, **extra), **kwargs)


def _method(client, path):
    obj = client
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj.create


def run_openai_sync(base_url, calls):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    seen = []
    for name, path, kwargs, text_of in calls:
        start = time.monotonic()
        result = _method(client, path)(**_kwargs(path, kwargs))
        if kwargs.get("stream"):
            seen.append(_timed("sync " + name, start, result, text_of))
        else:
            seen.append(Seen("sync " + name, False))
    client.close()
    return seen


def run_openai_async(base_url, calls):
    async def main():
        client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
        seen = []
        for name, path, kwargs, text_of in calls:
            start = time.monotonic()
            result = await _method(client, path)(**_kwargs(path, kwargs))
            if kwargs.get("stream"):
                seen.append(await _atimed("async " + name, start, result, text_of))
            else:
                seen.append(Seen("async " + name, False))
        await client.close()
        return seen

    return asyncio.run(main())


def run_anthropic(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key="none", max_retries=0, timeout=120)
    # This SDK version has no `temperature` argument; vLLM still reads it from the body.
    args = dict(model=MODEL, max_tokens=MAX_TOKENS, messages=MESSAGES, extra_body={"temperature": 0})
    client.messages.create(**args)
    seen = [Seen("anthropic messages", False)]
    start = time.monotonic()

    def text_of(event):
        return event.type == "content_block_delta" and getattr(event.delta, "text", "")

    seen.append(_timed("anthropic messages stream", start, client.messages.create(stream=True, **args), text_of))
    client.close()
    return seen


def raw_request(port, path, body):
    payload = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def leave_mid_stream(port, until, after_events=3):
    """Starts a long chat stream, reads `after_events` events that carry text, waits until `until()`
    holds (vLLM reports the request running), and closes the socket. Returns the monotonic time of
    the close; None when `until()` did not hold within 10 s (the socket is closed all the same)."""
    # 4,000 tokens (servers.py serves 4,096 positions): 2-4 s of generation here. A loaded machine can
    # spend that long before `until()` answers; the caller tells such a try apart (vLLM finished it).
    body = dict(model=MODEL, messages=MESSAGES, max_tokens=4000, ignore_eos=True, stream=True, **SAMPLING)
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(raw_request(port, "/v1/chat/completions", body))
    got = b""
    while got.count(b'"content":"') - got.count(b'"content":""') < after_events:
        data = s.recv(65536)
        if not data:
            raise RuntimeError("the stream ended before the client left")
        got += data
    deadline = time.monotonic() + 10
    while not until():
        if time.monotonic() > deadline:
            s.close()
            return None
        time.sleep(0.01)
    s.close()
    return time.monotonic()


# Agents: each turn sends the conversation so far back, the way agent code does with each SDK.
TURNS = ["Name a colour.", "Why that one?", "And a second?"]


def run_conversations(base_url, turns=TURNS):
    """Four agents, one conversation each, `len(turns)` turns: the openai SDK's chat streamed (the
    assistant message rebuilt from the streamed text) and not (the SDK's message object appended as
    it came), its Responses API (the answer's output items appended to the input), and the anthropic
    SDK (the answer's content blocks appended). Returns the number of streamed turns."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    limits = dict(model=MODEL, max_tokens=MAX_TOKENS, temperature=0, seed=1)

    messages = [{"role": "system", "content": "You answer in one line."}]
    for text in turns:
        messages.append({"role": "user", "content": text})
        stream = client.chat.completions.create(messages=messages, stream=True,
                                                stream_options={"include_usage": True}, **limits)
        messages.append({"role": "assistant", "content": "".join(_chat_text(c) for c in stream)})

    messages = [{"role": "user", "content": "Agent two. " + turns[0]}]
    for text in turns[1:] + [None]:
        answer = client.chat.completions.create(messages=messages, **limits)
        if text is None:
            break
        messages += [answer.choices[0].message, {"role": "user", "content": text}]

    items = "Agent three. " + turns[0]
    for text in turns[1:] + [None]:
        answer = client.responses.create(model=MODEL, input=items, max_output_tokens=MAX_TOKENS, temperature=0)
        if text is None:
            break
        items = ([{"role": "user", "content": items}] if isinstance(items, str) else items)
        items = items + list(answer.output) + [{"role": "user", "content": text}]
    client.close()

    claude = anthropic.Anthropic(base_url=base_url, api_key="none", max_retries=0, timeout=120)
    messages = [{"role": "user", "content": "Agent four. " + turns[0]}]
    for text in turns[1:] + [None]:
        answer = claude.messages.create(model=MODEL, max_tokens=MAX_TOKENS, messages=messages,
                                        system="You answer in one line.", extra_body={"temperature": 0})
        if text is None:
            break
        messages += [{"role": "assistant", "content": answer.content}, {"role": "user", "content": text}]
    claude.close()
    return len(turns)


def long_history(messages=500, size=2048):
    """An agent's history of `messages` messages of about `size` bytes each (about 1 MiB as JSON),
    alternating user and assistant, ending with the user: the body an agent that has run for hours
    sends."""
    words = "the licence grants each user the right to copy and share the work ".split()
    history = []
    for i in range(messages):
        text = " ".join(words[(i + j) % len(words)] for j in range(size // 5))[:size]
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"})
    return history


def run_long_history(base_url, history):
    """Two turns of an agent with a long history, through the openai SDK: the history, then the same
    history with the server's answer (or, when it refused the prompt, a stand-in answer) and a new user
    message appended. Returns each turn's status as the SDK saw it."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=120)
    statuses, messages = [], list(history)
    for turn in range(2):
        try:
            answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS,
                                                    temperature=0, seed=1)
            statuses.append(200)
            text = answer.choices[0].message.content or ""
        except openai.APIStatusError as e:
            statuses.append(e.status_code)
            text = "(no answer)"
        messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]
    client.close()
    return statuses
