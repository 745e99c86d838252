"""An OTLP/HTTP trace receiver for the conformance checks (docs/tracing.md): accepts POST /v1/traces on
127.0.0.1, decodes each ExportTraceServiceRequest with the OpenTelemetry project's published protobuf
definitions (the `opentelemetry-proto` package, not tokentap's reading of them), and appends every span
as one JSON line to a file: ids in hex, times in unix nanoseconds, attributes as plain values, events,
and the resource's service.name. Protobuf (gzipped or not) and OTLP/JSON bodies are both read.

    python otlp_receiver.py --port 4318 --out spans.jsonl      # or import Receiver and start it
"""

import argparse
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def plain(any_value):
    """An AnyValue as a plain Python value."""
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [plain(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in any_value.kvlist_value.values}
    if which == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, which)


def attributes(key_values):
    return {kv.key: plain(kv.value) for kv in key_values}


def spans_of(request):
    """Every span of an ExportTraceServiceRequest, as dicts."""
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "service_name": resource.get("service.name"),
                    "scope": scope_spans.scope.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None,
                    "trace_state": span.trace_state or None,
                    "flags": span.flags,
                    "name": span.name,
                    "kind": KINDS.get(span.kind, str(span.kind)),
                    "start_time_unix_nano": span.start_time_unix_nano,
                    "end_time_unix_nano": span.end_time_unix_nano,
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": e.name, "time_unix_nano": e.time_unix_nano, "attributes": attributes(e.attributes)}
                        for e in span.events
                    ],
                    "status": {"code": span.status.code, "message": span.status.message},
                }


class Receiver:
    """The server, on a thread of its own; every span it decodes goes to `out` as a JSON line."""

    def __init__(self, out, port=0):
        self.out = out
        self.lock = threading.Lock()
        self.exports = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                if self.path.rstrip("/") != "/v1/traces":
                    self.send_error(404)
                    return
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                json_body = self.headers.get("content-type", "").startswith("application/json")
                try:
                    if json_body:
                        json_format.Parse(body, request)
                    else:
                        request.ParseFromString(body)
                except Exception as error:  # a body that is not OTLP: say so, as a collector would
                    self.send_error(400, str(error))
                    return
                with receiver.lock:
                    receiver.exports += 1
                    with open(receiver.out, "a") as f:
                        for span in spans_of(request):
                            f.write(json.dumps(span) + "\n")
                answer = ExportTraceServiceResponse()
                payload = json_format.MessageToJson(answer).encode() if json_body else answer.SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/json" if json_body else "application/x-protobuf")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def spans(self):
        """The spans received so far."""
        try:
            with self.lock, open(self.out) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=4318)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    receiver = Receiver(a.out, a.port)
    print(f"receiving OTLP/HTTP traces at {receiver.url}/v1/traces into {a.out}", flush=True)
    receiver.server.serve_forever()


if __name__ == "__main__":
    main()
