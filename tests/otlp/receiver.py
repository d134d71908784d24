#!/usr/bin/env python3
"""A strict OTLP/HTTP logs receiver for the tests of vetto's OTLP exporter, built on the official
OTLP protobuf definitions (PyPI's opentelemetry-proto; tests/otlp/setup.sh makes its venv).

usage: receiver.py PORT OUT.jsonl [--fail-first N]

It listens on 127.0.0.1:PORT (loopback only) and takes POST /v1/logs with
  - application/json: parsed by google.protobuf.json_format.Parse into an
    ExportLogsServiceRequest (unknown fields refused), after checks of what that parser lets
    through but the OTLP JSON mapping does not: lowerCamelCase field names only, the 64-bit
    integers (timeUnixNano, observedTimeUnixNano, intValue) as decimal strings, severityNumber
    as a number, no traceId/spanId;
  - application/x-protobuf: parsed with ParseFromString.
Then every field is checked (check_request): one resourceLogs with service.name = "vetto",
vetto.store_id and host.name; one scopeLogs named vetto.audit; for each logRecord the seven
attributes with their types, the body a JSON object whose seq / session / session_seq / kind
match them, the times equal to the body's time, the severity the kind's, and the record's hash
recomputed from the store id, its position, its prev and the exact body.

Each accepted record appends {"store_id", "seq", "session", "kind"} to OUT.jsonl (duplicates
too: judging them is the caller's job, see compare.py). A malformed request appends
{"error": ...} to OUT.jsonl, is printed to stderr, and is answered 400. With --fail-first N the
first N POSTs to /v1/logs are answered 503 (and recorded nowhere): a collector overloaded at
first. Accepted requests are answered 200 with an empty ExportLogsServiceResponse ("{}").
"""

import argparse
import calendar
import datetime
import hashlib
import http.server
import json
import re
import signal
import sys

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

SEVERITY = {"INFO": 9, "WARN": 13}
RECORD_ATTRS = {
    "event.name": "string_value",
    "vetto.session": "string_value",
    "vetto.session_seq": "int_value",
    "vetto.seq": "int_value",
    "vetto.kind": "string_value",
    "vetto.hash": "string_value",
    "vetto.prev": "string_value",
}
RESOURCE_ATTRS = ("service.name", "vetto.store_id", "host.name")
KINDS = {
    "session_start", "session_end", "connection", "refusal", "limit", "approval_requested",
    "approval_granted", "approval_denied", "approval_timeout", "approval_revoked",
}
CAMEL = re.compile(r"[a-z][A-Za-z0-9]*\Z")
DIGITS = re.compile(r"[0-9]+\Z")
INT64 = re.compile(r"-?[0-9]+\Z")
HEX64 = re.compile(r"[0-9a-f]{64}\Z")
HEX = re.compile(r"[0-9a-f]+\Z")
GENESIS = "0" * 64


class Malformed(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Malformed(what)


def check_json_mapping(v, path="$"):
    """What json_format.Parse accepts but the OTLP JSON encoding does not produce."""
    if isinstance(v, dict):
        for k, x in v.items():
            where = f"{path}.{k}"
            need(CAMEL.match(k), f"{where}: not a lowerCamelCase field name")
            need(k not in ("traceId", "spanId"), f"{where}: vetto sends no trace context")
            if k in ("timeUnixNano", "observedTimeUnixNano"):
                need(isinstance(x, str) and DIGITS.match(x), f"{where}: not a decimal string")
            elif k == "intValue":
                need(isinstance(x, str) and INT64.match(x), f"{where}: not a decimal string")
            elif k == "severityNumber":
                need(isinstance(x, int) and not isinstance(x, bool), f"{where}: not a number")
            check_json_mapping(x, where)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            check_json_mapping(x, f"{path}[{i}]")


def attributes(kvs, where):
    out = {}
    for kv in kvs:
        need(kv.key not in out, f"{where}: attribute {kv.key} twice")
        out[kv.key] = kv.value
    return out


def one_of(value, kind, where):
    need(value.WhichOneof("value") == kind, f"{where}: not a {kind}")
    return getattr(value, kind)


def nanos(time):
    """Nanoseconds since the epoch of vetto's stored time (2026-11-30T23:59:59.123Z)."""
    need(isinstance(time, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", time),
         f"body time {time!r} is not RFC 3339 UTC with milliseconds")
    dt = datetime.datetime.strptime(time, "%Y-%m-%dT%H:%M:%S.%fZ")
    return calendar.timegm(dt.utctimetuple()) * 10**9 + dt.microsecond * 1000


def expected_severity(body):
    kind = body.get("kind")
    if kind in ("refusal", "limit"):
        return "WARN"
    if kind == "connection" and body.get("decision") != "allow":
        return "WARN"
    return "INFO"


def record_hash(store_id, seq, prev, body):
    h = hashlib.sha256()
    h.update(b"vetto-audit-record-v1\0")
    h.update(store_id.encode() + b"\0" + str(seq).encode() + b"\0" + prev.encode() + b"\0")
    h.update(body.encode())
    return h.hexdigest()


def check_record(lr, store_id, where):
    need(lr.trace_id == b"" and lr.span_id == b"", f"{where}: trace context")
    need(lr.flags == 0 and lr.dropped_attributes_count == 0, f"{where}: flags or dropped count")
    need(lr.severity_text in SEVERITY, f"{where}: severityText {lr.severity_text!r}")
    need(lr.severity_number == SEVERITY[lr.severity_text],
         f"{where}: severityNumber {lr.severity_number} for {lr.severity_text}")
    text = one_of(lr.body, "string_value", f"{where}.body")
    attrs = attributes(lr.attributes, where)
    need(set(attrs) == set(RECORD_ATTRS),
         f"{where}: attributes {sorted(attrs)}, want {sorted(RECORD_ATTRS)}")
    a = {k: one_of(attrs[k], t, f"{where}.{k}") for k, t in RECORD_ATTRS.items()}
    try:
        body = json.loads(text)
    except ValueError as e:
        raise Malformed(f"{where}: the body is not JSON: {e}")
    need(isinstance(body, dict), f"{where}: the body is not a JSON object")
    for field, attr in (("seq", "vetto.seq"), ("session", "vetto.session"),
                        ("session_seq", "vetto.session_seq"), ("kind", "vetto.kind")):
        need(body.get(field) == a[attr],
             f"{where}: body {field} {body.get(field)!r} but attribute {attr} {a[attr]!r}")
    need(a["event.name"] == a["vetto.kind"], f"{where}: event.name is not the kind")
    need(lr.event_name in ("", a["vetto.kind"]), f"{where}: eventName {lr.event_name!r}")
    need(a["vetto.kind"] in KINDS, f"{where}: unknown kind {a['vetto.kind']!r}")
    need(a["vetto.seq"] >= 1 and a["vetto.session_seq"] >= 1, f"{where}: positions start at 1")
    need(a["vetto.session"] != "", f"{where}: empty session")
    t = nanos(body.get("time"))
    need(lr.time_unix_nano == t, f"{where}: timeUnixNano {lr.time_unix_nano}, body time {t}")
    need(lr.observed_time_unix_nano == t, f"{where}: observedTimeUnixNano is not the time")
    need(lr.severity_text == expected_severity(body),
         f"{where}: severity {lr.severity_text} for a {body.get('kind')} record")
    need(HEX64.match(a["vetto.hash"]) and HEX64.match(a["vetto.prev"]), f"{where}: hash format")
    need(record_hash(store_id, a["vetto.seq"], a["vetto.prev"], text) == a["vetto.hash"],
         f"{where}: the hash does not match the store id, position, prev and body")
    need(a["vetto.seq"] > 1 or a["vetto.prev"] == GENESIS, f"{where}: record 1 not at genesis")
    return a


class Receiver:
    def __init__(self, out):
        self.out = out
        self.hashes = {}  # (store_id, seq) -> hash, to check the chain across requests

    def check_request(self, req):
        need(len(req.resource_logs) == 1, f"{len(req.resource_logs)} resourceLogs, want 1")
        rl = req.resource_logs[0]
        ra = attributes(rl.resource.attributes, "resource")
        need(set(ra) == set(RESOURCE_ATTRS), f"resource attributes {sorted(ra)}")
        res = {k: one_of(ra[k], "string_value", f"resource.{k}") for k in RESOURCE_ATTRS}
        need(res["service.name"] == "vetto", f"service.name {res['service.name']!r}")
        store_id = res["vetto.store_id"]
        need(HEX.match(store_id), f"vetto.store_id {store_id!r}")
        need(res["host.name"] != "", "empty host.name")
        need(len(rl.scope_logs) == 1, f"{len(rl.scope_logs)} scopeLogs, want 1")
        sl = rl.scope_logs[0]
        need(sl.scope.name == "vetto.audit", f"scope name {sl.scope.name!r}")
        need(sl.scope.version != "", "no scope version")
        need(len(sl.log_records) > 0, "no logRecords")
        got = []
        prev = None
        for i, lr in enumerate(sl.log_records):
            a = check_record(lr, store_id, f"logRecords[{i}]")
            if prev is not None:
                need(a["vetto.seq"] == prev["vetto.seq"] + 1, f"logRecords[{i}]: not in chain order")
                need(a["vetto.prev"] == prev["vetto.hash"], f"logRecords[{i}]: prev is not the hash before")
            known = self.hashes.get((store_id, a["vetto.seq"] - 1))
            need(known is None or known == a["vetto.prev"], f"logRecords[{i}]: breaks the chain received so far")
            prev = a
            got.append((store_id, a))
        for store_id, a in got:
            self.hashes[(store_id, a["vetto.seq"])] = a["vetto.hash"]
        return got

    def write(self, obj):
        self.out.write(json.dumps(obj, sort_keys=True) + "\n")
        self.out.flush()


def handler(receiver, fail_first):
    state = {"failing": fail_first}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, body, ctype="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def refuse(self, status, why):
            print(f"receiver: REFUSED ({status}): {why}", file=sys.stderr, flush=True)
            receiver.write({"error": f"{status}: {why}"})
            self.answer(status, json.dumps({"code": 3, "message": why}).encode())

        def do_GET(self):
            self.refuse(405, f"GET {self.path}")

        do_PUT = do_DELETE = do_GET

        def do_POST(self):
            if self.path != "/v1/logs":
                return self.refuse(404, f"POST {self.path}")
            length = self.headers.get("Content-Length")
            if length is None or not DIGITS.match(length):
                return self.refuse(411, "no Content-Length")
            raw = self.rfile.read(int(length))
            if len(raw) != int(length):
                return self.refuse(400, "the body is shorter than its Content-Length")
            if not self.headers.get("Host"):
                return self.refuse(400, "no Host header")
            if state["failing"] > 0:
                state["failing"] -= 1
                print("receiver: 503 on purpose (--fail-first)", file=sys.stderr, flush=True)
                return self.answer(503, b'{"code":14,"message":"not yet"}')
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            req = logs_service_pb2.ExportLogsServiceRequest()
            try:
                if ctype == "application/json":
                    doc = json.loads(raw.decode("utf-8"))
                    check_json_mapping(doc)
                    json_format.Parse(raw.decode("utf-8"), req)
                elif ctype == "application/x-protobuf":
                    req.ParseFromString(raw)
                else:
                    return self.refuse(415, f"Content-Type {ctype!r}")
                got = receiver.check_request(req)
            except (Malformed, ValueError, DecodeError, json_format.ParseError) as e:
                return self.refuse(400, str(e))
            for store_id, a in got:
                receiver.write({"store_id": store_id, "seq": a["vetto.seq"],
                                "session": a["vetto.session"], "kind": a["vetto.kind"]})
            print(f"receiver: {len(got)} records ({ctype})", file=sys.stderr, flush=True)
            if ctype == "application/json":
                self.answer(200, b"{}")
            else:
                self.answer(200, logs_service_pb2.ExportLogsServiceResponse().SerializeToString(),
                            "application/x-protobuf")

        def log_message(self, fmt, *args):
            pass

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("port", type=int)
    p.add_argument("out")
    p.add_argument("--fail-first", type=int, default=0)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(args.out, "a", encoding="utf-8") as out:
        receiver = Receiver(out)
        http.server.HTTPServer.allow_reuse_address = True
        server = http.server.HTTPServer(("127.0.0.1", args.port), handler(receiver, args.fail_first))
        print(f"receiver: listening on 127.0.0.1:{args.port}", flush=True)
        try:
            server.serve_forever()
        finally:
            server.server_close()


if __name__ == "__main__":
    main()
