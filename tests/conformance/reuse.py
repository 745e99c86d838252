"""tokentap's own upstream connections against vLLM's keep-alive (uvicorn closes an idle kept-alive
connection after 5 s): bursts of 200 and 300 concurrent streams, lulls past the keep-alive, requests spaced
at 5 s +- 10 ms. Every request must be answered as vLLM would answer it directly: tokentap never makes a
request fail that the server would have served.

Two tokentaps: the suite's own, with the default `timeouts.upstream_idle` (below vLLM's 5 s, so tokentap
closes idle connections first), and one that keeps them a minute, as tokentap did before that key existed,
so vLLM's closes land on idle connections and cross requests: what saves those requests there is noticing
the closes at once and sending again a request a closing connection never answered."""

import asyncio
import json
import time

import httpx

from servers import MODEL, Tokentap, scrape

BURSTS = (200, 300)
LULL = 7.0  # past vLLM's 5 s keep-alive
AFTER_LULL = 5
SPACED = 20  # requests 5 s +- 10 ms apart

BODY = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2, temperature=0,
            stream=True)


async def _one(client, url):
    """One short streaming chat request; None when it was answered whole, else what went wrong."""
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=BODY) as r:
            body = b"".join([chunk async for chunk in r.aiter_bytes()])
        if r.status_code != 200 or not body.rstrip().endswith(b"data: [DONE]"):
            return f"{r.status_code}: {body[:200]!r}"
        return None
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"


async def _burst(url, n):
    # One connection per request, so tokentap opens (and then keeps idle) one upstream connection each.
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=300) as client:
        return [e for e in await asyncio.gather(*(_one(client, url) for _ in range(n))) if e]


async def _sequence(url, count, spacing):
    """`count` requests one after another on one client connection, `spacing()` seconds apart (measured
    from the end of one to the start of the next)."""
    errors = []
    async with httpx.AsyncClient(timeout=300) as client:
        for i in range(count):
            if i:
                await asyncio.sleep(spacing(i))
            e = await _one(client, url)
            if e:
                errors.append(f"request {i + 1}: {e}")
    return errors


def _rounds(suite, group, tokentap):
    """Bursts, each followed by a lull past vLLM's keep-alive and a few requests."""
    failed = []
    for n in BURSTS:
        failed += [f"burst {n}: {e}" for e in asyncio.run(_burst(tokentap.url, n))]
        time.sleep(LULL)
        failed += [f"after the lull of burst {n}: {e}"
                   for e in asyncio.run(_sequence(tokentap.url, AFTER_LULL, lambda _: 0.05))]
    total = sum(BURSTS) + len(BURSTS) * AFTER_LULL
    suite.exact(group, f"failed requests of {total} (bursts {'/'.join(map(str, BURSTS))}, "
                       f"lulls {LULL:.0f} s)", len(failed), 0)
    for line in failed[:5]:
        print(f"      {line}", flush=True)
    return total


def _spaced(suite, group, tokentap):
    # 4.990, 4.991, ... 5.010 s: around the keep-alive, as a periodic client would land on it.
    spacing = lambda i: 4.990 + 0.020 * ((i * 7) % 21) / 20  # noqa: E731
    failed = asyncio.run(_sequence(tokentap.url, SPACED, spacing))
    suite.exact(group, f"failed of {SPACED} requests 5 s +- 10 ms apart", len(failed), 0)
    for line in failed[:5]:
        print(f"      {line}", flush=True)


def _counters(tokentap):
    m = scrape(tokentap.metrics_url)
    return {k: m.get("tokentap_" + k) for k in (
        "upstream_requests_resent_total", "upstream_idle_closed_by_upstream_total",
        "upstream_idle_expired_total", "upstream_idle_connections", "requests_total")}


def connection_reuse(suite, binary, tokenizer_root, out):
    """Both tokentaps through the same rounds; the second also at the keep-alive edge."""
    group = "upstream reuse, default idle"
    before = _counters(suite.tokentap)
    total = _rounds(suite, group, suite.tokentap)
    after = _counters(suite.tokentap)
    delta = {k: after[k] - before[k] for k in after}
    suite.exact(group, "requests counted", delta["requests_total"], total)
    suite.check(group, "idle connections closed by tokentap first", int(delta["upstream_idle_expired_total"]),
                "> 0", delta["upstream_idle_expired_total"] > 0,
                f"closed by vLLM: {int(delta['upstream_idle_closed_by_upstream_total'])}, "
                f"sent again: {int(delta['upstream_requests_resent_total'])}")

    group = "upstream reuse, idle 60s"
    edge = Tokentap(binary, suite.vllm.url, tokenizer_root, out, name="tokentap-idle60",
                    extra="timeouts:\n  upstream_idle: 60s\n")
    try:
        total = _rounds(suite, group, edge)
        _spaced(suite, group, edge)
        c = _counters(edge)
        suite.exact(group, "requests counted", c["requests_total"], total + SPACED)
        suite.check(group, "vLLM's closes seen on idle connections", int(c["upstream_idle_closed_by_upstream_total"]),
                    "> 0", c["upstream_idle_closed_by_upstream_total"] > 0,
                    f"sent again: {int(c['upstream_requests_resent_total'])}; idle now: "
                    f"{int(c['upstream_idle_connections'])}")
        with open(f"{out}/reuse.json", "w") as f:
            json.dump(c, f)
    finally:
        edge.stop()
