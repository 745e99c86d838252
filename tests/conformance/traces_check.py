"""tokentap's spans beside a real vLLM's own (docs/tracing.md, "Against vLLM"): vLLM started with its
OTLP exporter (`--otlp-traces-endpoint`, OTLP/HTTP protobuf) and two tokentaps in front of it with
`traces:` on (one plain, one with `propagate: true`), all exporting to one receiver that decodes OTLP
with the `opentelemetry-proto` package (otlp_receiver.py). Requests from the openai SDK carry a
`traceparent`; the checks: tokentap's span and vLLM's share the caller's trace id; without propagate
both are children of the caller's span (siblings) and vLLM got the caller's `traceparent` unchanged; with
propagate vLLM's span is tokentap's child; tokentap's span times and attributes equal its records; and
tokentap's `/metrics`, asked for OpenMetrics, carries on the TTFT bucket of that request an exemplar
naming the same trace and tokentap's span (docs/tracing.md, "From a panel to the trace").

Not part of the conformance suite yet: run it on its own, with a Python that has `openai` and
`opentelemetry-proto` (vLLM's virtualenv has both), after `cargo build --bin tokentap`:

    python tests/conformance/traces_check.py --vllm-python ~/.cache/tokentap-conformance/vllm/bin/python \\
        --tokentap target/debug/tokentap --model-dir /tmp/models/tiny-llama --out target/traces-check
"""

import argparse
import json
import os
import secrets
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))

import openai  # noqa: E402
from otlp_receiver import Receiver  # noqa: E402
from servers import MODEL, Tokentap, Vllm  # noqa: E402


def traceparent():
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def ask(url, header):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say something."}], max_tokens=12,
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_headers={"traceparent": header},
    )
    return [chunk for chunk in stream]


def wait_for(receiver, trace_id, n, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = [s for s in receiver.spans() if s["trace_id"] == trace_id]
        if len(spans) >= n:
            return spans
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} spans in trace {trace_id}: {receiver.spans()}")


def exemplars(metrics_url, family):
    """The exemplars of `family`'s buckets on tokentap's OpenMetrics page: (le, labels, value)."""
    request = urllib.request.Request(metrics_url, headers={"Accept": "application/openmetrics-text"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("application/openmetrics-text"), answer.headers
        page = answer.read().decode()
    found = []
    for line in page.splitlines():
        if not line.startswith(family + "_bucket{") or " # {" not in line:
            continue
        sample, exemplar = line.split(" # ", 1)
        le = sample.split('le="', 1)[1].split('"', 1)[0]
        labels_text, rest = exemplar[1:].split("} ", 1)
        labels = dict(pair.split("=", 1) for pair in labels_text.split(","))
        labels = {k: v.strip('"') for k, v in labels.items()}
        found.append((le, labels, float(rest.split()[0])))
    return found


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vllm-python", required=True)
    p.add_argument("--tokentap", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    receiver = Receiver(os.path.join(a.out, "spans.jsonl")).start()
    endpoint = receiver.url + "/v1/traces"
    # vLLM's exporter is gRPC unless told otherwise, and uses the endpoint as the whole URL.
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    vllm = plain = propagating = None
    results = {}
    try:
        vllm = Vllm(a.vllm_python, a.model_dir, a.out, ["--otlp-traces-endpoint", endpoint], env)
        root = os.path.dirname(a.model_dir)
        logs = {}
        for name, propagate in (("plain", "false"), ("propagating", "true")):
            logs[name] = os.path.join(a.out, f"records-{name}.jsonl")
            extra = (f"request_log: {{path: {logs[name]}}}\n"
                     f"traces: {{endpoint: {receiver.url}, interval: 100ms, propagate: {propagate}}}\n")
            tokentap = Tokentap(a.tokentap, vllm.url, root, a.out, name=f"tokentap-{name}", extra=extra)
            if propagate == "true":
                propagating = tokentap
            else:
                plain = tokentap

        for name, proxy in (("plain", plain), ("propagating", propagating)):
            trace_id, caller_span, header = traceparent()
            ask(proxy.url, header)
            spans = wait_for(receiver, trace_id, 2)
            ours = [s for s in spans if s["service_name"] == "tokentap"]
            theirs = [s for s in spans if s["service_name"] != "tokentap"]
            assert len(ours) == 1, spans
            assert theirs, spans
            span = ours[0]
            server = next((s for s in theirs if s["kind"] == "server"), theirs[0])
            assert span["parent_span_id"] == caller_span, span
            want_parent = span["span_id"] if name == "propagating" else caller_span
            assert server["parent_span_id"] == want_parent, (name, server, span)
            record = next(r for r in records(logs[name]) if r.get("trace_id") == trace_id)
            assert record["span_id"] == span["span_id"], (record, span)
            attrs = span["attributes"]
            for key in ("ttft_s", "e2e_s", "tpot_s", "max_gap_s"):
                assert attrs.get(f"tokentap.{key}") == record.get(key), (key, attrs, record)
            assert attrs["gen_ai.usage.output_tokens"] == record["output_tokens"], (attrs, record)
            assert attrs["gen_ai.usage.input_tokens"] == record["input_tokens"], (attrs, record)
            assert attrs["tokentap.goodput"] == record["goodput"], (attrs, record)
            e2e = span["end_time_unix_nano"] - span["start_time_unix_nano"]
            assert e2e == round(record["e2e_s"] * 1e9), (e2e, record)
            # The exemplar on the TTFT bucket this request fell in names the same trace and tokentap's
            # span, valued at the record's TTFT.
            ttft_family = "tokentap_time_to_first_token_seconds"
            mine = [e for e in exemplars(proxy.metrics_url, ttft_family) if e[1]["trace_id"] == trace_id]
            assert len(mine) == 1, (trace_id, exemplars(proxy.metrics_url, ttft_family))
            le, labels, value = mine[0]
            assert labels["span_id"] == span["span_id"], (labels, span)
            assert labels["request_id"] == record["id"], (labels, record)
            assert value == record["ttft_s"], (value, record)
            results[name] = {
                "trace_id": trace_id,
                "tokentap": {k: span[k] for k in ("name", "kind", "span_id", "parent_span_id")},
                "vllm": [{k: s[k] for k in ("name", "kind", "span_id", "parent_span_id")} for s in theirs],
                "vllm_attributes": sorted(server["attributes"]),
                "ttft_s": record.get("ttft_s"),
                "vllm_time_to_first_token": server["attributes"].get("gen_ai.latency.time_to_first_token"),
                "output_tokens": record["output_tokens"],
                "exemplar": {"bucket_le": le, **labels, "value": value},
            }
        print(json.dumps(results, indent=2))
        print("traces check: ok")
    finally:
        for process in (plain, propagating, vllm):
            if process is not None:
                process.stop()
        receiver.stop()


if __name__ == "__main__":
    main()
