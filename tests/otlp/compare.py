#!/usr/bin/env python3
"""Did the receiver get every record of the store exactly once, and nothing else?

usage: compare.py STORE.jsonl RECEIVED.jsonl
  STORE.jsonl     the store's records, one JSON object per line with at least `seq`
                  (`vetto audit query --json`)
  RECEIVED.jsonl  what tests/otlp/receiver.py wrote
"""

import json
import sys
from collections import Counter


def main():
    store = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
    received = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
    problems = []
    errors = [r["error"] for r in received if "error" in r]
    problems += [f"the receiver refused a request: {e}" for e in errors]
    records = [r for r in received if "error" not in r]
    stores = {r["store_id"] for r in records}
    if len(stores) > 1:
        problems.append(f"records from {len(stores)} stores: {sorted(stores)}")
    by_seq = {r["seq"]: r for r in store}
    if len(by_seq) != len(store):
        problems.append("the store listing has a position twice")
    got = Counter(r["seq"] for r in records)
    missing = sorted(set(by_seq) - set(got))
    extra = sorted(set(got) - set(by_seq))
    twice = sorted(s for s, n in got.items() if n > 1)
    if missing:
        problems.append(f"{len(missing)} records never received: {missing[:20]}")
    if extra:
        problems.append(f"{len(extra)} records received that the store does not have: {extra[:20]}")
    if twice:
        problems.append(f"{len(twice)} records received more than once: {twice[:20]}")
    for r in records:
        s = by_seq.get(r["seq"])
        for field in ("session", "kind"):
            if s is not None and field in s and s[field] != r[field]:
                problems.append(f"record {r['seq']}: {field} {r[field]!r}, the store says {s[field]!r}")
    for p in problems:
        print(f"compare: {p}", file=sys.stderr)
    print(f"compare: {len(store)} records in the store, {len(records)} received, "
          f"{len(problems)} problems")
    sys.exit(1 if problems or not store else 0)


if __name__ == "__main__":
    main()
