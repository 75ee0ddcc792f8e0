"""An OTLP/HTTP traces receiver for the tests: what the gateway exports is
decoded with the OpenTelemetry project's own protobuf messages
(`opentelemetry-proto`), never with the gateway's code.

Usage: python3 otlp_receiver.py [PORT] [--grpc]
Prints the port it listens on (127.0.0.1; PORT, or a free one), then serves:
  POST /v1/traces  an ExportTraceServiceRequest (application/x-protobuf)
  GET  /spans      every span received so far, as JSON
  POST /down       answer 503 to exports from now on; POST /up: accept again
With --grpc it also serves OTLP/gRPC (grpcio, the TraceService the
opentelemetry-proto package generates) on a free port, printed on a second
line; its spans join the same list, and while down it answers UNAVAILABLE.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS = []
LOCK = threading.Lock()
STATE = {"down": False, "exports": 0}


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", kind="application/json"):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path in ("/down", "/up"):
            STATE["down"] = self.path == "/down"
            return self.reply(200, b"{}")
        if self.path != "/v1/traces":
            return self.reply(404, b"{}")
        if self.headers.get("content-type") != "application/x-protobuf":
            return self.reply(415, b"{}")
        if STATE["down"]:
            return self.reply(503, b"{}")
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        record(request, {k.lower(): v for k, v in self.headers.items()})
        self.reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        if self.path != "/spans":
            return self.reply(404, b"{}")
        with LOCK:
            body = json.dumps({"spans": SPANS, "exports": STATE["exports"]}).encode()
        self.reply(200, body)


def record(request, headers):
    """Keeps the spans of one export, with the headers (or gRPC metadata)
    it came with."""
    got = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                got.append({
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "trace_state": s.trace_state,
                    "flags": s.flags,
                    "name": s.name,
                    "kind": s.kind,
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": attributes(s.attributes),
                    "events": [{"name": e.name, "time": e.time_unix_nano,
                                "attributes": attributes(e.attributes)} for e in s.events],
                    "status": {"code": s.status.code, "message": s.status.message},
                    "resource": resource,
                    "scope": ss.scope.name,
                    "headers": headers,
                })
    with LOCK:
        SPANS.extend(got)
        STATE["exports"] += 1


def serve_grpc():
    """OTLP/gRPC on a free port (returned), answering like the HTTP side."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            if STATE["down"]:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the receiver is down")
            metadata = {k.lower(): v for k, v in context.invocation_metadata()}
            record(request, metadata)
            return ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


args = [a for a in sys.argv[1:] if not a.startswith("--")]
ThreadingHTTPServer.allow_reuse_address = True
server = ThreadingHTTPServer(("127.0.0.1", int(args[0]) if args else 0), Handler)
print(server.server_address[1], flush=True)
if "--grpc" in sys.argv:
    grpc_server, grpc_port = serve_grpc()
    print(grpc_port, flush=True)
server.serve_forever()
