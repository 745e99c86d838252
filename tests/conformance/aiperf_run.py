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


def _run(url, tokenizer_dir, out, args):
    """Runs `aiperf profile` for a streaming chat endpoint with `args`, its log and artifacts in `out`."""
    argv = [
        os.path.join(os.path.dirname(sys.executable), "aiperf"), "profile", "--model", MODEL, "--url", url,
        "--endpoint-type", "chat", "--streaming", "--tokenizer", tokenizer_dir, *args,
        "--random-seed", "1", "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics",
        "--workers-max", "2", "--use-server-token-count", "--artifact-dir", out,
    ]
    # aiperf is run without HF_HUB_OFFLINE (REAL-SERVERS: it does not work with it set).
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "aiperf.log"), "wb") as log:
        subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=600)


def profile(url, tokenizer_dir, out, concurrency, requests):
    _run(url, tokenizer_dir, out, ["--request-count", str(requests), "--concurrency", str(concurrency),
                                   "--isl", "32", "--osl", "64"])
    with open(os.path.join(out, "profile_export_aiperf.json")) as f:
        return Profile(json.load(f))


def conversations(url, tokenizer_dir, out, conversations, turns):
    """aiperf's multi-turn mode: `conversations` sessions of exactly `turns` turns each, every turn
    sending the session's history (aiperf 0.13 accumulates the turns and the answers it got) with an
    X-Request-ID of its own. Returns aiperf's per-request records (profile_export.jsonl): each one's
    x_request_id, conversation_id and turn_index (from 0)."""
    _run(url, tokenizer_dir, out, [
        "--conversation-num", str(conversations), "--conversation-turn-mean", str(turns),
        "--conversation-turn-stddev", "0", "--conversation-turn-delay-mean", "50", "--concurrency", "2",
        "--isl", "32", "--osl", "16",
    ])
    with open(os.path.join(out, "profile_export.jsonl")) as f:
        return [json.loads(line)["metadata"] for line in f if line.strip()]
