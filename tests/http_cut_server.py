"""Serves a folder over HTTP on 127.0.0.1:PORT, answering the first request
for each manifest 503 and then 429 (to be retried), and cutting the first
response for each .tar short: it promises the whole size, sends half, and
closes the connection. Later requests get the rest, honouring `Range: bytes=N-` with a
206. Each request's path, Range header and status are appended to LOG, one
line each, as they finish. For http_test.sh (a client must resume with a
Range request from the byte it reached). Usage: http_cut_server.py DIR PORT LOG
"""
import http.server
import os
import sys

root, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cut = set()
refused = {}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self, status):
        with open(log, "a") as f:
            f.write(f"{self.path} {self.headers.get('Range', '-')} {status}\n")

    def do_GET(self):
        path = os.path.join(root, self.path.lstrip("/"))
        if not os.path.isfile(path):
            self.send_error(404)
            self.note(404)
            return
        if path.endswith(".conveyor-manifest") and refused.get(path, 0) < 2:
            status = (503, 429)[refused.get(path, 0)]
            refused[path] = refused.get(path, 0) + 1
            self.send_error(status)
            self.note(status)
            return
        data = open(path, "rb").read()
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
        status = 206 if start else 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(data) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if path.endswith(".tar") and path not in cut:
            cut.add(path)
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.note("cut")
            self.close_connection = True
            return
        self.wfile.write(data[start:])
        self.note(status)


http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
