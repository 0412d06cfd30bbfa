"""A small S3-compatible server for tests/s3_test.sh: GET and HEAD of objects,
path-style (http://127.0.0.1:PORT/BUCKET/KEY, the files under ROOT/BUCKET/),
with byte ranges, S3's XML error documents, and every request's AWS Signature
V4 checked as S3 checks it: the access key, the region and date of the
credential scope, the signed headers S3 requires (host, x-amz-date,
x-amz-content-sha256, and x-amz-security-token when the server has a token),
a date within 15 minutes, and the signature itself, recomputed with
botocore's S3SigV4Auth (AWS's own Python signer, Debian's python3-botocore),
code independent of libcurl's, which signs Conveyor's requests.

Why not a packaged server: Debian 12 packages none that runs alone (MinIO
and moto are not packaged; radosgw needs a Ceph cluster).

Each request is appended to LOG: METHOD PATH RANGE STATUS CODE. With
--slow-whole, a GET of a whole .tar (no Range) waits 60 s before it
answers, while range requests are answered at once: a client reading shards
while they download then reads its samples by (signed) range requests.

Usage:
  s3_server.py ROOT PORT LOG KEY SECRET REGION [TOKEN] [--public BUCKET] [--slow-whole]
  s3_server.py --self-check   # the signer against AWS's published signatures
"""
import datetime
import http.server
import os
import re
import sys
import time
import urllib.parse

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def signature(auth_class, service, method, url, headers, key, secret, token, region, amz_date):
    """The hex signature of a request whose signed headers are `headers`."""
    request = AWSRequest(method=method, url=url, headers=headers)
    request.context["timestamp"] = amz_date
    auth = auth_class(Credentials(key, secret, token), service, region)
    canonical = auth.canonical_request(request)
    return auth.signature(auth.string_to_sign(request, canonical), request)


def self_check():
    """botocore's signer against two signatures AWS publishes."""
    # The Signature V4 test suite's get-vanilla.
    got = signature(SigV4Auth, "service", "GET", "https://example.amazonaws.com/",
                    {"Host": "example.amazonaws.com", "X-Amz-Date": "20150830T123600Z"},
                    "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, "us-east-1",
                    "20150830T123600Z")
    assert got == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31", got
    # The S3 API Reference's example GET Object with a Range header.
    got = signature(S3SigV4Auth, "s3", "GET", "https://examplebucket.s3.amazonaws.com/test.txt",
                    {"Host": "examplebucket.s3.amazonaws.com", "Range": "bytes=0-9",
                     "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": "20130524T000000Z"},
                    "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None, "us-east-1",
                    "20130524T000000Z")
    assert got == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41", got
    print("s3_server: botocore's signer gives AWS's published signatures")


AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request,\s*"
                  r"SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart
    server_version = "conveyor-s3-test"

    def log_message(self, *args):
        pass

    def note(self, status, code):
        with open(self.server.log, "a") as f:
            f.write(f"{self.command} {self.path} {self.headers.get('Range', '-')} {status} {code}\n")

    def error(self, status, code, message):
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message}</Message><Resource>{self.path}</Resource></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.note(status, code)

    def authorized(self, bucket):
        """None when the request's signature holds, else (status, code, message)."""
        s = self.server
        header = self.headers.get("Authorization")
        if header is None:
            if bucket in s.public:
                return None
            return 403, "AccessDenied", "Access Denied"
        m = AUTH.match(header)
        if not m:
            return 400, "AuthorizationHeaderMalformed", "The authorization header is malformed"
        key, day, region, signed, sig = m.groups()
        if key != s.key:
            return 403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
        if region != s.region:
            return 400, "AuthorizationHeaderMalformed", f"the region '{region}' is wrong; expecting '{s.region}'"
        names = signed.split(";")
        if s.token and (self.headers.get("x-amz-security-token") != s.token or "x-amz-security-token" not in names):
            return 403, "InvalidToken", "The provided token is malformed or otherwise invalid."
        for name in ["host", "x-amz-date", "x-amz-content-sha256"]:
            if name not in names or self.headers.get(name) is None:
                return 400, "InvalidRequest", f"{name} is not among the signed headers"
        if self.headers["x-amz-content-sha256"] != EMPTY_SHA256:
            return 400, "XAmzContentSHA256Mismatch", "a GET's body is empty"
        amz_date = self.headers["x-amz-date"]
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        if day != amz_date[:8] or abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 900:
            return 403, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large."
        headers = {name: self.headers[name] for name in names}
        want = signature(S3SigV4Auth, "s3", self.command, f"http://{self.headers['host']}{self.path}", headers,
                         s.key, s.secret, s.token or None, s.region, amz_date)
        if want != sig:
            return 403, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
        return None

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        parts = urllib.parse.urlsplit(self.path)
        bucket, _, key = parts.path.lstrip("/").partition("/")
        refused = self.authorized(bucket)
        if refused:
            return self.error(*refused)
        if not os.path.isdir(os.path.join(self.server.root, bucket)):
            return self.error(404, "NoSuchBucket", "The specified bucket does not exist")
        path = os.path.join(self.server.root, bucket, urllib.parse.unquote(key))
        if not key or not os.path.isfile(path):
            return self.error(404, "NoSuchKey", "The specified key does not exist.")
        size = os.path.getsize(path)
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if rng and m:
            start = int(m.group(1))
            end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
            if start >= size:
                return self.error(416, "InvalidRange", "The requested range is not satisfiable")
        if self.server.slow_whole and not rng and key.endswith(".tar"):
            time.sleep(60)
        status = 206 if rng and m else 200
        self.send_response(status)
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command != "HEAD":
            with open(path, "rb") as f:
                f.seek(start)
                self.wfile.write(f.read(end - start + 1))
        self.note(status, "-")


def main():
    if sys.argv[1:] == ["--self-check"]:
        return self_check()
    args = sys.argv[1:]
    slow_whole = "--slow-whole" in args
    args = [a for a in args if a != "--slow-whole"]
    public = set()
    while "--public" in args:
        i = args.index("--public")
        public.add(args[i + 1])
        del args[i:i + 2]
    root, port, log, key, secret, region = args[:6]
    token = args[6] if len(args) > 6 else ""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
    server.root, server.log, server.key, server.secret, server.region, server.token = root, log, key, secret, region, token
    server.public, server.slow_whole = public, slow_whole
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
