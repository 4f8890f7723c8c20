#!/usr/bin/env python3
"""Local stand-ins for the AWS credential endpoints, on 127.0.0.1, for the chain tests:

  GET  /container/creds                        the container credentials endpoint (ECS/EKS);
                                               wants "Authorization: <--auth>" when --auth is given
  PUT  /latest/api/token                       IMDSv2 session token (needs the TTL header)
  GET  /latest/meta-data/iam/security-credentials/[ROLE]   IMDSv2, needs the token header
  GET  /?Action=AssumeRoleWithWebIdentity&...  STS; wants WebIdentityToken=<--web-token>
  GET  /?Action=AssumeRole&...                 STS; wants a SigV4 Authorization header made with
                                               the key --base-key (the signature itself is checked
                                               by moto in the S3 tests, not here)

Each answers different keys (ASIACONTAINER..., ASIAIMDS..., ASIASTS..., ASIAROLE...) so a test
sees which link answered. With --lifetime SECONDS every answer is a fresh key, numbered, that
expires SECONDS later (its Expiration says so), and

  GET|HEAD /bucket/<name>                      the file --object, with Range support, for a
                                               request signed with a key this server issued that
                                               has not expired (--enforce SECONDS after it was
                                               issued, default --lifetime); else 400 ExpiredToken
  GET  /_stats                                 {"issued": {"CONTAINER": n, ...}, "refused": n,
                                               "served": n}

so a test can read for longer than one key lives and see that the reader renewed its keys in
time. Prints "PORT <n>" once listening.
"""
import argparse
import datetime
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.parse

ARGS = None
IMDS_TOKEN = "imds-session-token"
LOCK = threading.Lock()
ISSUED = {}  # access key -> (token, issued at, kind)
STATS = {"issued": {}, "refused": 0, "served": 0}


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def creds(kind):
    if not ARGS.lifetime:
        key, token = "ASIA" + kind + "EXAMPLE", ("asia" + kind).lower() + "-session"
        with LOCK:
            ISSUED[key] = (token, time.time() + 10 ** 9, kind)
        return {"AccessKeyId": key, "SecretAccessKey": ("asia" + kind).lower() + "-secret",
                "Token": token, "Expiration": "2099-01-01T00:00:00Z", "Code": "Success"}
    with LOCK:
        n = STATS["issued"].get(kind, 0) + 1
        STATS["issued"][kind] = n
        now = time.time()
        key = "ASIA%s%04d" % (kind, n)
        token = "%s-session-%d" % (kind.lower(), n)
        ISSUED[key] = (token, now, kind)
    return {"AccessKeyId": key, "SecretAccessKey": key.lower() + "-secret", "Token": token,
            "Expiration": iso(now + ARGS.lifetime), "Code": "Success"}


def sts_xml(action, c):
    return ("<%sResponse><%sResult><Credentials>"
            "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>"
            "<SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>"
            "</%sResult></%sResponse>"
            % (action, action, c["AccessKeyId"], c["SecretAccessKey"], c["Token"], c["Expiration"], action, action))


def signing_key(headers):
    m = re.search(r"Credential=([^/,\s]+)/", headers.get("Authorization", ""))
    return m.group(1) if m else None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json", extra=None, head=False):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def do_POST(self):
        # STS as the AWS SDKs call it: a form in the body.
        n = int(self.headers.get("Content-Length") or 0)
        form = self.rfile.read(n).decode()
        self.path = "/?" + form
        return self.do_GET()

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.reply(200, IMDS_TOKEN, "text/plain")
        self.reply(400, "bad token request", "text/plain")

    def do_HEAD(self):
        self.serve_object(head=True)

    def serve_object(self, head=False):
        key = signing_key(self.headers)
        with LOCK:
            issued = ISSUED.get(key)
        enforce = ARGS.enforce if ARGS.enforce else ARGS.lifetime
        if (not ARGS.object or issued is None or self.headers.get("x-amz-security-token") != issued[0]
                or time.time() >= issued[1] + enforce):
            with LOCK:
                STATS["refused"] += 1
            return self.reply(400, "<Error><Code>ExpiredToken</Code><Message>The provided token has expired."
                                   "</Message></Error>", "application/xml", head=head)
        size = os.path.getsize(ARGS.object)
        extra = {"ETag": '"fixed-etag"', "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        with open(ARGS.object, "rb") as f:
            if head:
                with LOCK:
                    STATS["served"] += 1
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                return
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng or "")
            if m:
                a, b = int(m.group(1)), min(int(m.group(2)), size - 1)
                f.seek(a)
                data = f.read(b - a + 1)
                extra["Content-Range"] = "bytes %d-%d/%d" % (a, b, size)
                status = 206
            else:
                data = f.read()
                status = 200
        with LOCK:
            STATS["served"] += 1
        self.reply(status, data, "application/octet-stream", extra)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/_stats":
            with LOCK:
                return self.reply(200, json.dumps(STATS))
        if url.path == "/container/creds":
            if ARGS.auth and self.headers.get("Authorization") != ARGS.auth:
                return self.reply(401, '{"message": "unauthorized"}')
            return self.reply(200, json.dumps(creds("CONTAINER")))
        if url.path.startswith("/latest/meta-data/iam/security-credentials/"):
            if self.headers.get("X-aws-ec2-metadata-token") != IMDS_TOKEN:
                return self.reply(401, "", "text/plain")
            role = url.path[len("/latest/meta-data/iam/security-credentials/"):]
            if not role:
                return self.reply(200, "ferry-role", "text/plain")
            if role != "ferry-role":
                return self.reply(404, "", "text/plain")
            return self.reply(200, json.dumps(creds("IMDS")))
        if url.path.startswith("/bucket/"):
            return self.serve_object()
        q = urllib.parse.parse_qs(url.query)
        if q.get("Action") == ["AssumeRoleWithWebIdentity"]:
            if q.get("WebIdentityToken") != [ARGS.web_token] or not q.get("RoleArn"):
                return self.reply(403, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                                  "</Error></ErrorResponse>", "text/xml")
            return self.reply(200, sts_xml("AssumeRoleWithWebIdentity", creds("STS")), "text/xml")
        if q.get("Action") == ["AssumeRole"]:
            key = signing_key(self.headers)
            base_ok = key is not None and (key == ARGS.base_key or key in ISSUED)
            if not base_ok or not q.get("RoleArn") or not q.get("RoleSessionName"):
                return self.reply(403, "<ErrorResponse><Error><Code>AccessDenied</Code><Message>not signed with "
                                  "the base key</Message></Error></ErrorResponse>", "text/xml")
            return self.reply(200, sts_xml("AssumeRole", creds("ROLE")), "text/xml")
        self.reply(404, "not found", "text/plain")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--auth", default="")
    p.add_argument("--web-token", default="web-identity-token")
    p.add_argument("--base-key", default="AKIABASE")
    p.add_argument("--lifetime", type=float, default=0)
    p.add_argument("--enforce", type=float, default=0)
    p.add_argument("--object", default="")
    ARGS = p.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
