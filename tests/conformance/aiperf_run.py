"""aiperf (NVIDIA's benchmark client) against a URL: streaming chat, usage requested
(--use-server-token-count sets stream_options.include_usage), and its own summary read back.

aiperf's words: "time_to_first_token" is the client's TTFT; "inter_token_latency" is a per-request
average, (latency - TTFT)/(OSL - 1), which tokentap calls TPOT; "inter_chunk_latency" has one value per
gap between chunks that carry text, which tokentap calls ITL."""

import json
import os
import subprocess
import sys

from servers import MODEL


class Profile:
    def __init__(self, summary):
        def stat(name, key):
            return summary[name][key]

        self.requests = stat("request_count", "avg")
        self.ttft = stat("time_to_first_token", "avg") / 1000
        self.itl = stat("inter_token_latency", "avg") / 1000
        self.gaps = stat("inter_chunk_latency", "count")


def profile(url, tokenizer_dir, out, concurrency, requests):
    argv = [
        os.path.join(os.path.dirname(sys.executable), "aiperf"), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
        "--tokenizer", tokenizer_dir, "--request-count", str(requests), "--concurrency", str(concurrency),
        "--isl", "32", "--osl", "64", "--random-seed", "1", "--ui-type", "none", "--no-gpu-telemetry",
        "--no-server-metrics", "--workers-max", "2", "--use-server-token-count", "--artifact-dir", out,
    ]
    # aiperf is run without HF_HUB_OFFLINE (REAL-SERVERS: it does not work with it set).
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "aiperf.log"), "wb") as log:
        subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=600)
    with open(os.path.join(out, "profile_export_aiperf.json")) as f:
        return Profile(json.load(f))
