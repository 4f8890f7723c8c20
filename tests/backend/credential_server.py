#!/usr/bin/env python3
"""Local stand-ins for the three AWS credential endpoints, on 127.0.0.1, for the chain tests:

  GET  /container/creds                        the container credentials endpoint (ECS/EKS);
                                               wants "Authorization: <--auth>" when --auth is given
  PUT  /latest/api/token                       IMDSv2 session token (needs the TTL header)
  GET  /latest/meta-data/iam/security-credentials/[ROLE]   IMDSv2, needs the token header
  GET  /?Action=AssumeRoleWithWebIdentity&...  STS; wants WebIdentityToken=<--web-token>

Each answers different keys (ASIACONTAINER..., ASIAIMDS..., ASIASTS...) so a test sees which
link answered. Prints "PORT <n>" once listening.
"""
import argparse
import http.server
import json
import sys
import urllib.parse

ARGS = None
IMDS_TOKEN = "imds-session-token"


def creds(prefix):
    return {"AccessKeyId": prefix + "EXAMPLE", "SecretAccessKey": prefix.lower() + "-secret",
            "Token": prefix.lower() + "-session", "Expiration": "2099-01-01T00:00:00Z", "Code": "Success"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.reply(200, IMDS_TOKEN, "text/plain")
        self.reply(400, "bad token request", "text/plain")

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        if url.path == "/container/creds":
            if ARGS.auth and self.headers.get("Authorization") != ARGS.auth:
                return self.reply(401, '{"message": "unauthorized"}')
            return self.reply(200, json.dumps(creds("ASIACONTAINER")))
        if url.path.startswith("/latest/meta-data/iam/security-credentials/"):
            if self.headers.get("X-aws-ec2-metadata-token") != IMDS_TOKEN:
                return self.reply(401, "", "text/plain")
            role = url.path[len("/latest/meta-data/iam/security-credentials/"):]
            if not role:
                return self.reply(200, "ferry-role", "text/plain")
            if role != "ferry-role":
                return self.reply(404, "", "text/plain")
            return self.reply(200, json.dumps(creds("ASIAIMDS")))
        q = urllib.parse.parse_qs(url.query)
        if q.get("Action") == ["AssumeRoleWithWebIdentity"]:
            if q.get("WebIdentityToken") != [ARGS.web_token] or not q.get("RoleArn"):
                return self.reply(403, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                                  "</Error></ErrorResponse>", "text/xml")
            c = creds("ASIASTS")
            xml = ("<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                   "<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>"
                   "<SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>"
                   "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
                   % (c["AccessKeyId"], c["SecretAccessKey"], c["Token"], c["Expiration"]))
            return self.reply(200, xml, "text/xml")
        self.reply(404, "not found", "text/plain")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--auth", default="")
    p.add_argument("--web-token", default="web-identity-token")
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
