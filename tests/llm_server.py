#!/usr/bin/env python3
"""A scripted chat-model server for tests/test_llm.c (standard library only).

Usage: llm_server.py SCRIPT LOG

Binds 127.0.0.1 on a free port and prints the port as stdout's first line. SCRIPT is a
JSON file: a list of responses played in order, one per request, or an object
{"key": K, "responses": [...]} where K is the API key the client is expected to send.
Each response may hold:

  status      HTTP status (200)
  headers     {name: value} sent with it
  body        a string sent as is, or JSON (encoded); "$AUTH" in it is replaced by the
              key that came in the request's auth header (to test redaction of echoes)
  pad_bytes   spaces appended to the body (a big but valid reply)
  no_length   true: no Content-Length; the body ends when the connection closes
  delay_s     wait this long before answering (to test timeouts)
  expect      protocol checks: {"method": M, "path": P,
                                "headers": {name: value | true (present) | false (absent)},
                                "json": {"dotted.path.0": value}}
              a failed check is answered 418 {"error": {"message": "check failed: ..."}}

The object form may also hold "get": {"models": BODY, "props": BODY}: a GET whose path
ends in /models or /props (a client asking for the model's context window) is answered
200 with that body, or 404 when the script has none, outside the script's order and
outside LOG (so scripts and request counts stay as they were).

Requests past the end of the script are answered 500 "script exhausted". Every request is
appended to LOG as one JSON line: n, method, path, headers (the auth headers'
values replaced by {"has_key", "sha256" (a 16-hex prefix), "len"}), body (JSON when it
parses, else text), key_match (the auth header carried the script's key), key_elsewhere
(a key showed up outside the auth header: path, other headers or body) and check.

The server exits when its stdin closes (the test that started it is gone) or after
120 s, whichever comes first, so a crashed test cannot leak it.
"""
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AUTH_HEADERS = ("authorization", "x-api-key")


def auth_value(name, value):
    if name == "authorization" and value.lower().startswith("bearer "):
        return value[7:].strip()
    return value.strip()


def lookup(obj, dotted):
    for part in dotted.split("."):
        if isinstance(obj, list):
            try:
                obj = obj[int(part)]
            except (ValueError, IndexError):
                return KeyError
        elif isinstance(obj, dict):
            if part not in obj:
                return KeyError
            obj = obj[part]
        else:
            return KeyError
    return obj


class Script:
    def __init__(self, path, log_path):
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict):
            self.key = data.get("key")
            self.responses = data.get("responses", [])
            self.get = data.get("get", {})
        else:
            self.get = {}
            self.key = None
            self.responses = data
        self.log_path = log_path
        self.lock = threading.Lock()
        self.n = 0

    def next(self):
        with self.lock:
            i = self.n
            self.n += 1
        if i < len(self.responses):
            return i, self.responses[i]
        return i, {"status": 500, "body": {"error": {"message": "llm_server: script exhausted"}}}

    def log(self, entry):
        with self.lock:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
                f.flush()


def check(expect, method, path, headers, body_json):
    if not expect:
        return None
    if "method" in expect and expect["method"] != method:
        return "method %s, want %s" % (method, expect["method"])
    if "path" in expect and expect["path"] != path:
        return "path %s, want %s" % (path, expect["path"])
    for name, want in expect.get("headers", {}).items():
        got = headers.get(name.lower())
        if want is True and got is None:
            return "header %s missing" % name
        if want is False and got is not None:
            return "header %s present" % name
        if isinstance(want, str) and got != want:
            return "header %s is %r, want %r" % (name, got, want)
    for dotted, want in expect.get("json", {}).items():
        got = lookup(body_json, dotted)
        if got is KeyError:
            return "body has no %s" % dotted
        if got != want:
            return "body %s is %r, want %r" % (dotted, got, want)
    return None


def make_handler(script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            self.handle_any()

        def do_POST(self):
            self.handle_any()

        def answer_get(self, name):
            body = script.get.get(name)
            out = json.dumps(body if body is not None else {"error": {"message": "not found"}}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def handle_any(self):
            bare = self.path.split("?")[0].rstrip("/")
            if self.command == "GET" and bare.endswith(("/models", "/props")):
                self.answer_get(bare.rsplit("/", 1)[1])
                return
            n, resp = script.next()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            text = raw.decode("utf-8", "replace")
            try:
                body_json = json.loads(text)
            except ValueError:
                body_json = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            keys = set()
            logged = {}
            auth = None
            for name, value in headers.items():
                if name in AUTH_HEADERS:
                    k = auth_value(name, value)
                    keys.add(k)
                    auth = k
                    logged[name] = {"has_key": bool(k), "len": len(k),
                                    "sha256": hashlib.sha256(k.encode()).hexdigest()[:16]}
                else:
                    logged[name] = value
            if script.key:
                keys.add(script.key)
            elsewhere = False
            for k in keys:
                if not k:
                    continue
                if k in self.path or k in text:
                    elsewhere = True
                for name, value in headers.items():
                    if name not in AUTH_HEADERS and k in value:
                        elsewhere = True
            failed = check(resp.get("expect"), self.command, self.path, headers, body_json)
            entry = {"n": n, "method": self.command, "path": self.path, "headers": logged,
                     "body": body_json if body_json is not None else text,
                     "key_elsewhere": elsewhere, "check": failed or "ok"}
            if script.key:
                entry["key_match"] = auth == script.key
            script.log(entry)

            if failed:
                resp = {"status": 418, "body": {"error": {"message": "check failed: " + failed}}}
            delay = float(resp.get("delay_s", 0))
            if delay > 0:
                time.sleep(delay)
            body = resp.get("body", "")
            if not isinstance(body, str):
                body = json.dumps(body)
            body = body.replace("$AUTH", auth or "")
            out = body.encode() + b" " * int(resp.get("pad_bytes", 0))
            try:
                self.send_response(int(resp.get("status", 200)))
                for name, value in resp.get("headers", {}).items():
                    self.send_header(name, str(value))
                if "Content-Type" not in resp.get("headers", {}):
                    self.send_header("Content-Type", "application/json")
                if resp.get("no_length"):
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout, size cap): that is the test

    return Handler


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: llm_server.py SCRIPT LOG\n")
        return 2
    script = Script(sys.argv[1], sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(script))
    server.daemon_threads = True

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Timer(120, lambda: os._exit(3)).start()
    sys.stdout.write("%d\n" % server.server_address[1])
    sys.stdout.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
