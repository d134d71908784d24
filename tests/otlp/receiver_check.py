#!/usr/bin/env python3
"""Checks tests/otlp/receiver.py itself: it takes a request vetto's encoder made (the unit test
`sample_request_for_the_receiver` writes one) as JSON and as protobuf, and refuses every
malformed variant of it.

usage: receiver_check.py SAMPLE.json PORT OUT.jsonl   (with the receiver on 127.0.0.1:PORT
writing OUT.jsonl, started without --fail-first; run by tests/otlp/check.sh)
"""

import copy
import json
import sys
import urllib.error
import urllib.request
from collections import Counter

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2


def post(port, body, ctype="application/json", path="/v1/logs"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def records(doc):
    return doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"]


def attr(rec, key):
    return next(a for a in rec["attributes"] if a["key"] == key)


def edit_body(rec, f):
    body = json.loads(rec["body"]["stringValue"])
    f(body)
    rec["body"]["stringValue"] = json.dumps(body, separators=(",", ":"))


def first_of_kind(doc, kind):
    return next(r for r in records(doc) if attr(r, "vetto.kind")["value"]["stringValue"] == kind)


def mutations():
    """(name, edit of the parsed request, why): each must be refused, saying why."""
    def rename(d, old, new):
        r = records(d)[0]
        r[new] = r.pop(old)

    def drop_attr(d, key):
        r = records(d)[0]
        r["attributes"] = [a for a in r["attributes"] if a["key"] != key]

    def set_attr(d, key, value):
        attr(records(d)[0], key)["value"] = value

    def resource_attr(d, key, value):
        for a in d["resourceLogs"][0]["resource"]["attributes"]:
            if a["key"] == key:
                a["value"] = {"stringValue": value}

    def time_plus_1ms(d):
        r = records(d)[0]
        r["timeUnixNano"] = str(int(r["timeUnixNano"]) + 1_000_000)

    def limit_as_info(d):
        r = first_of_kind(d, "limit")
        r["severityText"], r["severityNumber"] = "INFO", 9

    def deny_as_info(d):
        r = next(r for r in records(d) if '"decision":"deny"' in r["body"]["stringValue"])
        r["severityText"], r["severityNumber"] = "INFO", 9

    def session_start_as_warn(d):
        r = first_of_kind(d, "session_start")
        r["severityText"], r["severityNumber"] = "WARN", 13

    def swap_first_two(d):
        rs = records(d)
        rs[0], rs[1] = rs[1], rs[0]

    def duplicate_attr(d):
        r = records(d)[0]
        r["attributes"].append(copy.deepcopy(r["attributes"][0]))

    def two_resources(d):
        d["resourceLogs"].append(copy.deepcopy(d["resourceLogs"][0]))

    def no_records(d):
        d["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = []

    return [
        ("an unknown field", lambda d: records(d)[0].__setitem__("bogus", 1), "no field named"),
        ("timeUnixNano as a number", lambda d: records(d)[0].__setitem__(
            "timeUnixNano", int(records(d)[0]["timeUnixNano"])), "timeUnixNano: not a decimal"),
        ("severityNumber as its enum name", lambda d: records(d)[0].__setitem__(
            "severityNumber", "SEVERITY_NUMBER_INFO"), "severityNumber: not a number"),
        ("a snake_case field name", lambda d: rename(d, "timeUnixNano", "time_unix_nano"),
         "not a lowerCamelCase"),
        ("intValue as a number", lambda d: set_attr(d, "vetto.seq", {"intValue": 1}),
         "intValue: not a decimal"),
        ("vetto.seq as a string", lambda d: set_attr(d, "vetto.seq", {"stringValue": "1"}),
         "vetto.seq: not a int_value"),
        ("a traceId", lambda d: records(d)[0].__setitem__("traceId", "0" * 32), "trace context"),
        ("a missing attribute", lambda d: drop_attr(d, "vetto.prev"), "attributes ["),
        ("a duplicate attribute", duplicate_attr, "twice"),
        ("the body's seq not the attribute's", lambda d: edit_body(
            records(d)[0], lambda b: b.__setitem__("seq", 99)), "body seq 99"),
        ("the body edited where only the hash tells", lambda d: edit_body(
            records(d)[0], lambda b: b.__setitem__("uid", 0)), "the hash does not match"),
        ("the body not JSON", lambda d: records(d)[0]["body"].__setitem__("stringValue", "{"),
         "the body is not JSON"),
        ("the body not a string", lambda d: records(d)[0].__setitem__("body", {"intValue": "1"}),
         "body: not a string_value"),
        ("another session attribute",
         lambda d: set_attr(d, "vetto.session", {"stringValue": "x"}), "body session"),
        ("event.name not the kind",
         lambda d: set_attr(d, "event.name", {"stringValue": "limit"}), "event.name is not"),
        ("timeUnixNano not the body's time", time_plus_1ms, "body time"),
        ("a limit as INFO", limit_as_info, "severity INFO for a limit"),
        ("a denied connection as INFO", deny_as_info, "severity INFO for a connection"),
        ("a session start as WARN", session_start_as_warn, "severity WARN for a session_start"),
        ("records out of chain order", swap_first_two, "chain order"),
        ("service.name not vetto", lambda d: resource_attr(d, "service.name", "other"),
         "service.name"),
        ("an empty host.name", lambda d: resource_attr(d, "host.name", ""), "host.name"),
        ("another store id", lambda d: resource_attr(d, "vetto.store_id", "ab" * 16),
         "the hash does not match"),
        ("another scope", lambda d: d["resourceLogs"][0]["scopeLogs"][0]["scope"].__setitem__(
            "name", "other"), "scope name"),
        ("two resourceLogs", two_resources, "2 resourceLogs"),
        ("no logRecords", no_records, "no logRecords"),
    ]


def main():
    sample_path, port, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    raw = open(sample_path, "rb").read()
    doc = json.loads(raw)
    n = len(records(doc))
    failures = []

    def expect(name, got, want):
        status, body = got
        if status != want:
            failures.append(f"{name}: HTTP {status}, want {want}: {body[:300]!r}")
        return body

    # The encoder's request, as JSON and as protobuf.
    body = expect("the sample as JSON", post(port, raw), 200)
    if body != b"{}":
        failures.append(f"the JSON answer is {body!r}, want {{}}")
    msg = json_format.Parse(raw.decode(), logs_service_pb2.ExportLogsServiceRequest())
    body = expect("the sample as protobuf",
                  post(port, msg.SerializeToString(), "application/x-protobuf"), 200)
    logs_service_pb2.ExportLogsServiceResponse().ParseFromString(body)
    refused = 0
    for name, edit, why in mutations():
        d = copy.deepcopy(doc)
        edit(d)
        body = expect(name, post(port, json.dumps(d).encode()), 400)
        if why.encode() not in body:
            failures.append(f"{name}: refused, but not for {why!r}: {body[:300]!r}")
        refused += 1
    for name, args, want in [
        ("protobuf garbage", (b"\xff\xff\xff", "application/x-protobuf"), 400),
        ("not JSON", (b"{", "application/json"), 400),
        ("text/plain", (raw, "text/plain"), 415),
        ("another path", (raw, "application/json", "/v1/traces"), 404),
    ]:
        expect(name, post(port, *args), want)
        refused += 1

    lines = [json.loads(l) for l in open(out_path, encoding="utf-8")]
    errors = [l for l in lines if "error" in l]
    got = Counter((l["store_id"], l["seq"]) for l in lines if "error" not in l)
    if len(errors) != refused:
        failures.append(f"{len(errors)} refusals recorded, want {refused}")
    if sorted(got.values()) != [2] * n or len(got) != n:
        failures.append(f"records recorded {dict(got)}, want each of {n} twice")
    for f in failures:
        print(f"receiver_check: FAILED: {f}", file=sys.stderr)
    print(f"receiver_check: the sample ({n} records) taken as JSON and protobuf; "
          f"{refused} malformed requests refused; {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
