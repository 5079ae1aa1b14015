#!/usr/bin/env python3
"""A stand-in for the clouds' instance metadata services, on 127.0.0.1, for cairnd's spot-notice tests.

It speaks each protocol as the clouds document it and refuses requests that break it:
  AWS IMDSv2: PUT /latest/api/token (needs X-aws-ec2-metadata-token-ttl-seconds) gives a token;
    GET /latest/meta-data/spot/instance-action needs X-aws-ec2-metadata-token: 401 without it,
    404 while there is no notice, else the notice JSON.
  GCP: GET /computeMetadata/v1/instance/{preempted,maintenance-event} need Metadata-Flavor: Google.
  Azure: GET /metadata/scheduledevents?api-version=... needs Metadata: true.
Whether a notice is out is read from files in STATE_DIR on every request: `aws` (the instance-action
JSON), `gcp` (present: preempted TRUE), `azure` (the Events JSON array). Each request is appended to
STATE_DIR/requests.log as "METHOD PATH ok|refused".

Usage: metadata_responder.py STATE_DIR PORT_FILE   (the chosen port is written to PORT_FILE)
"""
import http.server
import os
import secrets
import sys

STATE = sys.argv[1]
TOKENS = set()


def state(name):
    try:
        with open(os.path.join(STATE, name)) as f:
            return f.read()
    except FileNotFoundError:
        return None


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="text/plain"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with open(os.path.join(STATE, "requests.log"), "a") as f:
            f.write(f"{self.command} {self.path} {'ok' if code < 400 or code == 404 else 'refused'}\n")

    def do_PUT(self):
        if self.path == "/latest/api/token":
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.reply(400, "missing X-aws-ec2-metadata-token-ttl-seconds")
            tok = secrets.token_hex(16)
            TOKENS.add(tok)
            return self.reply(200, tok)
        self.reply(404, "not found")

    def do_GET(self):
        path = self.path
        if path.startswith("/latest/meta-data/"):
            if self.headers.get("X-aws-ec2-metadata-token") not in TOKENS:
                return self.reply(401, "Unauthorized")
            if path == "/latest/meta-data/spot/instance-action":
                notice = state("aws")
                return self.reply(200, notice, "application/json") if notice else self.reply(404, "Not Found")
            return self.reply(404, "Not Found")
        if path.startswith("/computeMetadata/v1/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.reply(403, "Missing Metadata-Flavor:Google header")
            if path == "/computeMetadata/v1/instance/preempted":
                return self.reply(200, "TRUE" if state("gcp") is not None else "FALSE")
            if path == "/computeMetadata/v1/instance/maintenance-event":
                return self.reply(200, "NONE")
            return self.reply(404, "Not Found")
        if path.startswith("/metadata/scheduledevents"):
            if self.headers.get("Metadata") != "true" or "api-version=" not in path:
                return self.reply(400, '{"error": "Bad request: Metadata header and api-version required"}')
            events = state("azure") or "[]"
            return self.reply(200, '{"DocumentIncarnation": 1, "Events": %s}' % events, "application/json")
        self.reply(404, "Not Found")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
