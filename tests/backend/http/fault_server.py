#!/usr/bin/env python3
"""An HTTP/1.1 file server on 127.0.0.1 that misbehaves on purpose, for the remote-source tests.

Serves one file (--file) at every path; the first path segment picks the fault:
  /ok/...              plain ranged GETs (ETag, Last-Modified, Accept-Ranges)
  /drop/N/...          the first N GETs of each distinct range send half the body and close
  /short/N/...         the first N GETs answer a 206 whose body (and Content-Length) is half the range
  /reset/N/...         the first N requests are closed without an answer
  /storm/N/...         the first N requests answer 503 (a storm), then normal
  /always/CODE/...     every request answers CODE
  /change/N/...        after N GETs the object changes (new ETag, other bytes); honours If-Match
  /noetag/...          no ETag, only Last-Modified
  /nohead/...          HEAD answers 403 (as presigned GET URLs do)
  /norange/...         ignores Range, always 200 with the whole file
  /slow/BPS/...        bodies sent at BPS bytes per second, in pieces of at most 4 KiB
Counters are per path (tests use a fresh path each). Prints "PORT <n>" once listening.
"""
import argparse
import http.server
import socket
import sys
import threading
import time

lock = threading.Lock()
counts = {}
DATA = b""


def bump(key):
    with lock:
        counts[key] = counts.get(key, 0) + 1
        return counts[key]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        self.serve(head=False)

    def send_body(self, status, body, extra, head, rate=0):
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if not rate:
            self.wfile.write(body)
            return
        piece = max(1, min(4096, rate // 10))
        try:
            for at in range(0, len(body), piece):
                self.wfile.write(body[at:at + piece])
                self.wfile.flush()
                time.sleep(piece / rate)
        except OSError:
            pass  # the reader went away

    def serve(self, head):
        parts = self.path.split("?")[0].strip("/").split("/")
        mode = parts[0] if parts else "ok"
        arg = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        path_key = self.path
        data, etag = DATA, '"v1"'
        lm = "Mon, 30 Nov 2026 10:00:00 GMT"
        if mode == "reset" and bump(("reset", path_key)) <= arg:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if mode == "storm" and bump(("storm", path_key)) <= arg:
            return self.send_body(503, b"<Error><Code>SlowDown</Code></Error>", [], head)
        if mode == "always":
            return self.send_body(arg, b"<Error><Code>Nope</Code><Message>always fails</Message></Error>", [], head)
        if mode == "nohead" and head:
            return self.send_body(403, b"", [], head)
        if mode == "change":
            n = counts.get(("change", path_key), 0)
            if not head:
                n = bump(("change", path_key))
            if n > arg:
                data, etag = bytes(b ^ 0xFF for b in DATA), '"v2"'
                lm = "Mon, 30 Nov 2026 11:00:00 GMT"
            im = self.headers.get("If-Match")
            if im is not None and im != etag:
                return self.send_body(412, b"<Error><Code>PreconditionFailed</Code></Error>", [], head)
        headers = [("Accept-Ranges", "bytes"), ("Last-Modified", lm)]
        if mode != "noetag":
            headers.append(("ETag", etag))
        rng = self.headers.get("Range")
        if head or rng is None or mode == "norange":
            return self.send_body(200, data, headers, head, rate=arg if mode == "slow" else 0)
        spec = rng.split("=", 1)[1]
        first, last = spec.split("-")
        first = int(first)
        last = min(int(last) if last else len(data) - 1, len(data) - 1)
        if first >= len(data):
            return self.send_body(416, b"", [("Content-Range", "bytes */%d" % len(data))], head)
        body = data[first:last + 1]
        headers.append(("Content-Range", "bytes %d-%d/%d" % (first, last, len(data))))
        key = (mode, path_key, first)
        if mode == "drop" and bump(key) <= arg:
            self.send_response(206)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if mode == "short" and bump(key) <= arg:
            return self.send_body(206, body[: len(body) // 2], headers, head)
        self.send_body(206, body, headers, head, rate=arg if mode == "slow" else 0)


def main():
    global DATA
    p = argparse.ArgumentParser()
    p.add_argument("--file", required=True)
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args()
    with open(a.file, "rb") as f:
        DATA = f.read()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
