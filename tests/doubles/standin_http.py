"""What the HTTP stand-ins of real servers share (sglang_standin.py, vllm_standin.py): quiet logs, a
JSON answer, a Prometheus text answer, one ``data: {json}`` event of a stream. Each stand-in keeps its own routes and
bodies, cited from its server's source."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class StandinHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, code: int, doc) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _metrics(self, text: str) -> None:
        """/metrics as prometheus_client serves it: text format 0.0.4."""
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, doc: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        self.wfile.flush()
