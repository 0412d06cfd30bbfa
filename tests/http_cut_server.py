"""Serves a folder over HTTP on 127.0.0.1:PORT for http_test.sh, honouring
`Range: bytes=N-` and `bytes=N-M` with a 206, in one of two modes:
- cut (the default): the first request for each manifest is answered 503 and
  then 429 (to be retried), and the first whole GET of each .tar is cut short:
  it promises the whole size, sends half, and closes the connection (a client
  must resume with a Range request from the byte it reached);
- slow: every whole GET of a .tar waits 60 s before it answers, while range
  requests are answered at once (a client reading shards while they download
  must read its samples by range, and not wait for the downloads);
- stall: every GET of a .tar, whole or range, waits 60 s (a client told to
  stop must not wait for them), and logs "stalled" as it starts waiting;
- down: every whole GET of a .tar is answered 503, while range requests are
  answered (downloads that keep failing for a reason a later try may mend
  must not fail the shard's samples);
- corrupt: every whole GET of a .tar has one byte of its body changed on the
  way (the file on disk intact): a client must hold the body to the
  manifest's checksum.
Each request's path, Range header and status are appended to LOG, one line
each, as they finish. Usage: http_cut_server.py DIR PORT LOG [cut|slow|stall|down|corrupt]
"""
import http.server
import os
import re
import sys
import time

root, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mode = sys.argv[4] if len(sys.argv) > 4 else "cut"
cut = set()
refused = {}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

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
        if mode == "cut" and path.endswith(".conveyor-manifest") and refused.get(path, 0) < 2:
            status = (503, 429)[refused.get(path, 0)]
            refused[path] = refused.get(path, 0) + 1
            self.send_error(status)
            self.note(status)
            return
        if mode == "down" and path.endswith(".tar") and not self.headers.get("Range"):
            self.send_error(503)
            self.note(503)
            return
        data = open(path, "rb").read()
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        start, end = (int(m.group(1)), int(m.group(2)) if m.group(2) else len(data) - 1) if m else (0, len(data) - 1)
        end = min(end, len(data) - 1)
        if path.endswith(".tar") and ((mode == "slow" and not m) or mode == "stall"):
            if mode == "stall":
                self.note("stalled")
            time.sleep(60)
        status = 206 if m else 200
        self.send_response(status)
        self.send_header("Content-Length", str(end + 1 - start))
        if m:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if mode == "cut" and path.endswith(".tar") and not m and path not in cut:
            cut.add(path)
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.note("cut")
            self.close_connection = True
            return
        body = data[start:end + 1]
        if mode == "corrupt" and path.endswith(".tar") and not m:
            body = body[:600] + bytes([body[600] ^ 0x55]) + body[601:]
        self.wfile.write(body)
        self.note(status)


server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
server.daemon_threads = True
server.serve_forever()
