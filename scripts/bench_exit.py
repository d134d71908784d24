#!/usr/bin/env python3
"""Time from a sandboxed command's exit to the sandbox runner's exit, in ms (median of N).

  bench_exit.py N RUNNER...   RUNNER is the sandbox command line up to its command; the
                              command run inside is `date +%s%N` (it prints, then exits).

What is measured: the command's exit, the sandbox's PID 1 and namespaces ending, and the
runner's own teardown up to its exit status reaching us (minus date's own exit, a few µs).
"""
import statistics
import subprocess
import sys
import time

n, runner = int(sys.argv[1]), sys.argv[2:]
lat = []
for _ in range(n):
    p = subprocess.run(runner + ["date", "+%s%N"], capture_output=True, text=True)
    end = time.time_ns()
    if p.returncode != 0:
        raise SystemExit(f"runner failed ({p.returncode}): {p.stderr.strip()[:300]}")
    lat.append((end - int(p.stdout.strip().splitlines()[-1])) / 1e6)
print(f"{statistics.median(lat):.2f}")
