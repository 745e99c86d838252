"""The conformance suite in capture mode: the real clients talk to the real vLLM directly, while
`tokentap capture` reads vLLM's port on lo; every check of the inline suite that holds for a meter out
of the path runs unchanged, client vs capture (the capture's /metrics against vLLM's own and what the
clients saw). Needs root (an AF_PACKET socket); run by hand:

    sudo bash tests/conformance/run.sh --capture

With --record-fixture DIR, the openai SDK group with usage is also written by tcpdump to
DIR/vllm-0.32-openai.pcap, with the capture's own records of those requests beside it
(DIR/vllm-0.32-openai.records.jsonl): the fixture tests/capture.rs reads back."""

import argparse
import os
import signal
import subprocess
import sys
import time
import traceback

import conformance
import servers
from conformance import Suite, fmt
from servers import Metrics, Process, Reused, Vllm, free_port

# The suite's own scrapes of vLLM's /metrics go to the port the capture reads: it meters them, as
# api="other" requests, which an inline tokentap never sees. The checks leave them out.
_scrape = servers.scrape
CAPTURE_METRICS = set()


def scrape(url):
    m = _scrape(url)
    if url in CAPTURE_METRICS:
        kept = Metrics("")
        kept.samples = [(n, l, v) for n, l, v in m.samples if l.get("api") != "other"]
        return kept
    return m


servers.scrape = conformance.scrape = scrape


class Capturing(Process):
    """`tokentap capture` of vLLM's port on lo. `url` is vLLM's own: the clients talk to it directly."""

    def __init__(self, binary, vllm, tokenizer_root, log_dir, records):
        self.url, self.port = vllm.url, vllm.port
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        CAPTURE_METRICS.add(self.metrics_url)
        config = os.path.join(log_dir, "tokentap-capture.yaml")
        with open(config, "w") as f:
            f.write(
                f"tokenizer_dirs: [{tokenizer_root}]\nupstream: {vllm.url}\n"
                f"request_log: {{path: {records}, gaps: true}}\n"
                f"capture: {{interface: lo, ports: [{vllm.port}]}}\n"
            )
        argv = [binary, "capture", "--config", config, "--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        super().__init__("tokentap-capture", argv, dict(os.environ, RUST_LOG="info"),
                         os.path.join(log_dir, "tokentap-capture.log"))
        self.wait_ready(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=30)


def lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def recorded(suite, fixture, records):
    """The openai SDK group with usage, written by tcpdump meanwhile; the capture's records of it kept."""
    os.makedirs(fixture, exist_ok=True)
    pcap = os.path.join(fixture, "vllm-0.32-openai.pcap")
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "0", "-U", "-w", pcap, f"tcp port {suite.tokentap.port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    before = len(lines(records))
    conformance.sdk(suite, True, 1)
    time.sleep(1.0)
    dump.send_signal(signal.SIGINT)
    dump.wait(timeout=10)
    kept = lines(records)[before:]
    with open(os.path.join(fixture, "vllm-0.32-openai.records.jsonl"), "w") as f:
        f.write("\n".join(kept) + "\n")
    suite.check("fixture", "records kept with the capture file", len(kept), "> 0", len(kept) > 0)


def unmetered(suite):
    t = conformance.scrape(suite.tokentap.metrics_url)
    for reason in ("lost_segment", "not_http", "buffer", "max_connections", "upgrade"):
        got = t.get("tokentap_capture_unmetered_total", reason=reason)
        suite.check("capture", f"connections not metered: {reason}", fmt(got), 0, got == 0)
    packets = t.get("tokentap_capture_packets_total")
    suite.check("capture", "packets read (info)", fmt(packets), "", True)
    for result in ("in_order", "out_of_order", "duplicate", "overlap"):
        got = t.get("tokentap_capture_segments_total", result=result)
        suite.check("capture", f"segments {result} (info)", fmt(got), "", True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vllm-python", required=True)
    p.add_argument("--tokentap", required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--reuse-vllm", metavar="URL")
    p.add_argument("--record-fixture", metavar="DIR")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("capture.py: terminated"))
    started = time.monotonic()
    vllm = capturing = suite = None
    records = os.path.join(a.out, "capture-records.jsonl")
    try:
        vllm = Reused(a.reuse_vllm) if a.reuse_vllm else Vllm(a.vllm_python, a.model_dir, a.out)
        print(f"vLLM ready at {vllm.url} after {time.monotonic() - started:.0f} s", flush=True)
        capturing = Capturing(a.tokentap, vllm, os.path.dirname(a.model_dir), a.out, records)
        suite = Suite(vllm, capturing)
        conformance.warm_up(suite)
        if a.record_fixture:
            recorded(suite, a.record_fixture, records)
        for usage in (True, False):
            for n in (1, 2):
                conformance.sdk(suite, usage, n)
        conformance.random_text(suite)
        conformance.ttft(suite)
        conformance.prefix_cache(suite)
        conformance.conversations(suite)
        conformance.long_history(suite)
        conformance.aiperf(suite, a.model_dir, os.path.join(a.out, "aiperf-c1"), 1, 8)
        conformance.aiperf(suite, a.model_dir, os.path.join(a.out, "aiperf-c4"), 4, 16)
        conformance.cancellation(suite)
        unmetered(suite)
    except Exception:
        traceback.print_exc()
        if suite:
            suite.check("suite", "ran to the end", "error", "no error", False)
        else:
            return 1
    finally:
        for server in (capturing, vllm):
            if server:
                server.stop()
    return conformance.write_results(suite, started, a.vllm_python, a.out, mode="capture")


if __name__ == "__main__":
    sys.exit(main())
