#!/usr/bin/env python3
"""Summarises a runtime-tools validation run (tests/conformance/runtime-tools.sh).

usage: tap_report.py RESULTS_DIR KNOWN_FILE GATE_RUNTIME REFERENCE_RUNTIME RUNTIME...

RESULTS_DIR/<runtime>/<test>.tap, .stderr, .rc (and optional .leftover) are read. Prints, per
runtime, one line per test (pass/fail/skip counts and a verdict) and a summary line; then the
failures of GATE_RUNTIME that REFERENCE_RUNTIME does not share. Exit status 1 when such a
failure is not excused by KNOWN_FILE, else 0.

A failure is either a TAP assertion (`not ok N - text`, keyed by its text and occurrence) or a
test-level error: exit status not 0 (or the timeout), no plan, fewer or more assertions than
planned, or — for the tests that print `1..0` and report only through a YAML diagnostic (the
hook tests) — an "error" in that diagnostic. A gate failure is excused when the reference
fails (or skips) the same assertion, or errors at test level for the same reason; an assertion
the reference never printed counts as passed by it only when the reference ran that test cleanly.
"""
import json
import os
import re
import sys

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TMP = re.compile(r"/tmp/[^\s\"']*?/ocitest\d+")
WORK = re.compile(r"/tmp/vetto-conformance\.[^/\s\"']+/[^/\s\"']+")
TAP_LINE = re.compile(r"^(not ok|ok)\b\s*(\d+)?\s*(?:-\s*)?(.*)$")
PLAN = re.compile(r"^1\.\.(\d+)")
# Diagnostics that every correct runtime gets (upstream bugs in the suite): (test, error) -> note.
QUIRKS = {
    ("hooks", "Hooks MUST be called in the listed order"): "upstream bug: the expected output "
    "lacks ' called' after post-start1..post-stop2, so a runtime that runs all hooks gets this "
    "diagnostic; only lifecycle errors are detected",
}


def norm(text):
    text = UUID.sub("<id>", text)
    text = TMP.sub("<bundle>", text)
    text = WORK.sub("<work>", text)
    return text.strip()


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


class Result:
    def __init__(self, runtime, test, rdir, timeout):
        self.runtime, self.test = runtime, test
        self.tap = read(os.path.join(rdir, test + ".tap")) or ""
        self.stderr = read(os.path.join(rdir, test + ".stderr")) or ""
        rc = (read(os.path.join(rdir, test + ".rc")) or "").strip()
        self.rc = int(rc) if rc.lstrip("-").isdigit() else None
        self.leftover = (read(os.path.join(rdir, test + ".leftover")) or "").strip()
        self.passed, self.failed, self.skipped = {}, {}, {}  # key -> TAP line
        self.plan = None
        self.count = 0
        self.diag_errors = []
        seen = {}
        self.diags = {}  # key -> the YAML diagnostic printed after that assertion
        last_key = None
        lines = self.tap.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if line.strip() == "---" and line.startswith("  "):
                block = []
                while i < len(lines) and lines[i].strip() != "...":
                    block.append(lines[i])
                    i += 1
                i += 1
                try:
                    diag = json.loads("\n".join(block))
                except ValueError:
                    diag = None
                if isinstance(diag, dict) and diag.get("error"):
                    self.diag_errors.append(str(diag["error"]))
                if isinstance(diag, dict) and last_key is not None:
                    self.diags.setdefault(last_key, diag)
                last_key = None
                continue
            m = PLAN.match(line)
            if m:
                if self.plan is None:
                    self.plan = int(m.group(1))
                continue
            m = TAP_LINE.match(line)
            if not m:
                continue
            self.count += 1
            status, text = m.group(1), m.group(3)
            directive = ""
            dm = re.match(r"#\s*(SKIP|TODO)\b\s*(.*)$", text, re.I)
            if dm:
                directive, text = dm.group(1).upper(), dm.group(2)
            text = norm(text)
            n = seen.get(text, 0) + 1
            seen[text] = n
            key = text if n == 1 else f"{text} [#{n}]"
            last_key = key
            if directive:
                self.skipped[key] = line
            elif status == "ok":
                self.passed[key] = line
            else:
                self.failed[key] = line
        self.error = None  # test-level failure reason
        self.quirk = None
        self.quiet = False
        if self.rc is None:
            self.error = "not run"
        elif self.rc in (124, 137):
            self.error = f"timed out after {timeout}s"
        elif self.rc != 0:
            self.error = f"exit status {self.rc}"
        elif self.plan is None and not self.tap.strip():
            # the *_fail tests print nothing and exit 0 when the runtime refuses the bundle
            self.quiet = True
        elif self.plan is None:
            self.error = "no TAP plan"
        elif self.plan != self.count:
            self.error = f"planned {self.plan}, ran {self.count}"
        elif self.plan == 0 and self.diag_errors:
            first = norm(self.diag_errors[0]).splitlines()[0]
            self.quirk = QUIRKS.get((test, first))
            if not self.quirk:
                self.error = "diagnostic error: " + first

    def verdict(self):
        if self.error:
            return "ERROR (" + self.error + ")"
        if self.failed:
            return "FAIL"
        if self.skipped and not self.passed:
            return "SKIP"
        if self.quiet:
            return "ok (exit 0, no output)"
        return "ok (quirk: see below)" if self.quirk else "ok"

    def excerpt(self, key=None, lines=4):
        noise = ("Clean: ",)
        diag = self.diags.get(key) or {}
        text = str(diag.get("stderr") or diag.get("error") or "") if key else ""
        text = text if text.strip() else self.stderr
        keep = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith(noise)]
        text = " | ".join(keep[:lines])
        return norm(text)[:300] if text else "(empty)"


def load_known(path):
    known = []
    for raw in (read(path) or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        body = line.split(" # ", 1)[0].rstrip()
        reason = line.split(" # ", 1)[1].strip() if " # " in line else ""
        if ":" not in body:
            continue
        test, sub = body.split(":", 1)
        known.append((test.strip(), sub.strip(), reason, raw))
    return known


def compare(results, tests, gate, ref, known_file):
    """GATE's failures that REF does not share: (flagged, excused, not_compared, used)."""
    known = load_known(known_file)
    used = set()
    have_ref = ref in results
    flagged, excused, not_compared, shared_items = [], [], [], []
    for t in tests:
        g = results[gate][t]
        r = results[ref][t] if have_ref else None
        items = []  # (kind, key, TAP line or reason)
        if g.error:
            items.append(("test", g.error, g.error))
        for key, line in g.failed.items():
            items.append(("assertion", key, line))
        for kind, key, line in items:
            shared = False
            excuse = next((k for k in known if k[0] in (t, "*") and k[1] in key), None)
            if r is not None:
                if kind == "test":
                    shared = r.error is not None and r.error == g.error
                elif key in r.failed or key in r.skipped:
                    shared = True
                elif key not in r.passed and (r.error or r.failed):
                    # the reference never got to this assertion: no verdict to compare with
                    not_compared.append((t, line))
                    continue
            if shared:
                if not excuse:
                    shared_items.append((t, line))
                continue
            if excuse:
                used.add(excuse[3])
                excused.append((t, line, excuse[2]))
            else:
                flagged.append((t, line, g.excerpt(key if kind == "assertion" else None)))
    return flagged, excused, not_compared, used, shared_items


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "--flagged":
        # --flagged DIR KNOWN GATE REF TEST: exit 0 when GATE has a failure in TEST that REF
        # passes and KNOWN does not excuse (then GATE is tried again)
        d, known_file, gate, ref, test = sys.argv[2:]
        results = {rt: {test: Result(rt, test, os.path.join(d, rt), "?")} for rt in (gate, ref)}
        return 0 if compare(results, [test], gate, ref, known_file)[0] else 1
    if len(sys.argv) == 7 and sys.argv[1] == "--shares":
        # --shares DIR KNOWN GATE REF TEST: exit 0 when REF shares a failure of GATE that KNOWN
        # does not excuse (then a flaky REF failure could hide a GATE failure: REF is retried)
        d, known_file, gate, ref, test = sys.argv[2:]
        results = {rt: {test: Result(rt, test, os.path.join(d, rt), "?")} for rt in (gate, ref)}
        return 0 if compare(results, [test], gate, ref, known_file)[4] else 1
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    res_dir, known_file, gate, ref = sys.argv[1:5]
    runtimes = sys.argv[5:]
    timeout = os.environ.get("TIMEOUT", "?")
    tests = sorted(
        {
            m.group(1)
            for rt in runtimes
            for f in os.listdir(os.path.join(res_dir, rt))
            for m in [re.match(r"^(\w+)\.rc$", f)]
            if m
        }
    )
    results = {rt: {t: Result(rt, t, os.path.join(res_dir, rt), timeout) for t in tests} for rt in runtimes}

    for rt in runtimes:
        print(f"== {rt}")
        print(f"   {'test':38} {'pass':>5} {'fail':>5} {'skip':>5}  verdict")
        tp = tf = ts = errs = bad = 0
        for t in tests:
            r = results[rt][t]
            p, f, s = len(r.passed), len(r.failed), len(r.skipped)
            tp, tf, ts = tp + p, tf + f, ts + s
            errs += bool(r.error)
            bad += bool(r.error or r.failed)
            retried = read(os.path.join(res_dir, rt, t + ".retries"))
            extra = f"  [{retried.strip()}]" if retried else ""
            extra += "  [leftover cleaned: " + r.leftover.replace("\n", "; ")[:120] + "]" if r.leftover else ""
            print(f"   {t:38} {p:5} {f:5} {s:5}  {r.verdict()}{extra}")
        print(
            f"   summary {rt}: {len(tests)} tests, {len(tests) - bad} clean, {errs} errored; "
            f"assertions: {tp} passed, {tf} failed, {ts} skipped"
        )

    quirks = {(t, r.quirk) for rt in runtimes for t, r in results[rt].items() if r.quirk}
    for t, q in sorted(quirks):
        print(f"   quirk {t}: {q}")
    if gate not in results:
        return 0
    flagged, excused, not_compared, used, _ = compare(results, tests, gate, ref, known_file)
    who = f"{gate} fails, {ref} passes" if ref in results else f"{gate} fails (no reference runtime)"
    print(f"== {who}: {len(flagged)} (+{len(excused)} excused by {os.path.basename(known_file)})")
    for t, line, err in flagged:
        print(f"   {t}: {line.strip()}")
        print(f"      detail: {err}")
    for t, line, reason in excused:
        print(f"   excused {t}: {line.strip()}  ({reason})")
    for t, line in not_compared:
        print(f"   not compared ({ref} did not get there) {t}: {line.strip()}")
    flaky = [(t, read(os.path.join(res_dir, gate, t + ".retries"))) for t in tests]
    for t, note in flaky:
        if note:
            print(f"   retried {t}: {note.strip()}  (see {gate}/{t}.try*.tap)")
    print(f"   ({len(load_known(known_file))} entries in {os.path.basename(known_file)}, {len(used)} needed in this run)")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
