"""The two servers under test, started on free loopback ports: a real vLLM (CPU, dummy weights, the tiny
model from model.py) and tokentap (the debug binary) in front of it. Also the /metrics scrapers for both.
Standard library only, so it runs in the clients' virtualenv."""

import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

MODEL = "tiny-llama"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


class Process:
    def __init__(self, name, argv, env, log_path):
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, url, timeout):
        """Waits for `url` to answer 200; stops the process if it does not (or on SIGTERM meanwhile)."""
        try:
            self._wait_ready(url, timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, url, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log: {self.tail()}")
            try:
                if get(url, timeout=2.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready within {timeout} s; log: {self.tail()}")

    def tail(self, lines=30):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return "\n" + b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            # The whole session: vLLM's engine core is a child process of the API server.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


class Vllm(Process):
    def __init__(self, python, model_dir, log_dir, extra_args=(), extra_env=None, name="vllm"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = self.url + "/metrics"
        env = dict(os.environ)
        env.update(
            HF_HUB_OFFLINE="1",
            VLLM_HOST_IP="127.0.0.1",
            VLLM_LOOPBACK_IP="127.0.0.1",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_NO_USAGE_STATS="1",
        )
        env.update(extra_env or {})
        argv = [
            python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", model_dir, "--served-model-name", MODEL,
            "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--max-model-len", "4096", "--enforce-eager", "--max-num-seqs", "8",
            "--seed", "1",
            # The server's own view (docs/metrics.md, "Inside the TTFT"): each answer's `metrics` object
            # (queue, prefill, generation) and `usage.prompt_tokens_details.cached_tokens`.
            "--enable-per-request-metrics", "--enable-prompt-tokens-details",
            *extra_args,
        ]
        super().__init__(name, argv, env, os.path.join(log_dir, f"{name}.log"))
        self.wait_ready(self.url + "/health", timeout=300)


class Reused:
    """A vLLM started by hand (same flags as Vllm), for work on the suite itself."""

    def __init__(self, url):
        self.url = url.rstrip("/")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.metrics_url = self.url + "/metrics"

    def stop(self):
        pass


class Tokentap(Process):
    def __init__(self, binary, upstream, tokenizer_root, log_dir, name="tokentap", extra=""):
        self.port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        config = os.path.join(log_dir, f"{name}.yaml")
        with open(config, "w") as f:
            f.write(f"tokenizer_dirs: [{tokenizer_root}]\n{extra}")
        argv = [
            binary, "--config", config, "--upstream", upstream,
            "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
        ]
        env = dict(os.environ, RUST_LOG="info")
        super().__init__(name, argv, env, os.path.join(log_dir, f"{name}.log"))
        self.wait_ready(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=30)


class Relay:
    """A TCP relay in front of vLLM that keeps every byte vLLM sends back, so the bytes a client got
    through tokentap can be compared with the very bytes vLLM sent for that request."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.sent = bytearray()  # vLLM's bytes, all connections, in arrival order
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src, dst, keep):
        try:
            while data := src.recv(65536):
                if keep:
                    with self.lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def mark(self):
        with self.lock:
            return len(self.sent)

    def since(self, mark):
        with self.lock:
            return bytes(self.sent[mark:])

    def stop(self):
        self.listener.close()


def dechunk_response(raw):
    """The body of one raw HTTP/1.1 response (chunked or with a Content-Length)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return rest
    body = bytearray()
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        body += rest[:size]
        rest = rest[size + 2:]
    return bytes(body)


_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """One scrape of a Prometheus text exposition."""

    def __init__(self, text):
        self.samples = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _LINE.match(line)
            if m:
                labels = dict(_LABEL.findall(m.group(2) or ""))
                self.samples.append((m.group(1), labels, float(m.group(3))))

    def get(self, name, **labels):
        """The sum over every series of `name` whose labels include `labels`."""
        return sum(
            v for n, l, v in self.samples
            if n == name and all(l.get(k) == want for k, want in labels.items())
        )

    def __sub__(self, before):
        """The change since `before`, as a Metrics of differences (counters and histograms)."""
        out = Metrics("")
        old = {(n, tuple(sorted(l.items()))): v for n, l, v in before.samples}
        for n, l, v in self.samples:
            out.samples.append((n, l, v - old.get((n, tuple(sorted(l.items()))), 0.0)))
        return out


def scrape(url):
    return Metrics(get(url)[1].decode())


def settle(vllm, tokentap, timeout=30.0):
    """Both sides at rest: nothing running in vLLM, nothing in flight in tokentap, and two scrapes in a
    row the same (vLLM updates its counters after the last byte left). Returns the last scrapes."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        v, t = scrape(vllm.metrics_url), scrape(tokentap.metrics_url)
        idle = (
            v.get("vllm:num_requests_running") == 0
            and v.get("vllm:num_requests_waiting") == 0
            and t.get("tokentap_requests_in_flight") == 0
        )
        key = (
            v.get("vllm:request_success_total"), v.get("vllm:generation_tokens_total"),
            t.get("tokentap_requests_total"), t.get("tokentap_output_tokens_total"),
        )
        if idle and key == last:
            return v, t
        if time.monotonic() > deadline:
            raise RuntimeError("the servers did not come to rest")
        last = key if idle else None
        time.sleep(0.3)
