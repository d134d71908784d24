#!/usr/bin/env python3
"""Run a command in the VM through qemu-guest-agent (guest-exec) and relay its result.

usage: qga.py SOCKET [--timeout S] [--stdin] [--wait-ready S] [--] CMD [ARGS...]

stdout/stderr of CMD are written to ours when it exits (guest-exec captures, it does not
stream); the exit status is CMD's (128+N when killed by signal N, 124 on timeout).
--stdin sends our stdin as CMD's input. --wait-ready S waits up to S seconds for the agent.
"""
import base64
import json
import os
import socket
import sys
import time


class Agent:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(path)
        self.buf = b""
        self.sync()

    def _send(self, obj):
        self.s.sendall(json.dumps(obj).encode() + b"\n")

    def _recv(self):
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("agent closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        line = line.lstrip(b"\xff").strip()
        return json.loads(line) if line else self._recv()

    def sync(self):
        token = int(time.time() * 1000) % (1 << 31)
        # 0xff resets the agent's parser after a half-sent command from an earlier client.
        self.s.sendall(b"\xff")
        self._send({"execute": "guest-sync-delimited", "arguments": {"id": token}})
        while True:
            r = self._recv()
            if r.get("return") == token:
                return

    def call(self, cmd, **args):
        self._send({"execute": cmd, "arguments": args} if args else {"execute": cmd})
        r = self._recv()
        if "error" in r:
            raise RuntimeError(f"{cmd}: {r['error'].get('desc', r['error'])}")
        return r["return"]


def main(argv):
    timeout, send_stdin, ready = 3600.0, False, 0.0
    sock = argv.pop(0)
    while argv and argv[0].startswith("--"):
        opt = argv.pop(0)
        if opt == "--":
            break
        if opt == "--timeout":
            timeout = float(argv.pop(0))
        elif opt in ("--stdin", "--stdin=1"):
            send_stdin = True
        elif opt == "--stdin=0":
            send_stdin = False
        elif opt == "--wait-ready":
            ready = float(argv.pop(0))
        else:
            sys.exit(f"qga.py: unknown option {opt}")
    cmd = argv
    deadline = time.time() + ready
    while True:
        try:
            agent = Agent(sock)
            break
        except (OSError, ConnectionError):
            if time.time() >= deadline:
                raise
            time.sleep(1)
    if not cmd:
        return 0
    args = {"path": cmd[0], "arg": cmd[1:], "capture-output": True}
    if send_stdin:
        args["input-data"] = base64.b64encode(sys.stdin.buffer.read()).decode()
    pid = agent.call("guest-exec", **args)["pid"]
    end = time.time() + timeout
    delay = 0.05
    while True:
        st = agent.call("guest-exec-status", pid=pid)
        if st.get("exited"):
            break
        if time.time() > end:
            sys.stderr.write(f"qga.py: timeout after {timeout}s (pid {pid} left running)\n")
            return 124
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    for key, out in (("out-data", sys.stdout.buffer), ("err-data", sys.stderr.buffer)):
        if key in st:
            out.write(base64.b64decode(st[key]))
            out.flush()
    if st.get("out-truncated") or st.get("err-truncated"):
        sys.stderr.write("qga.py: output truncated by the agent\n")
    if "signal" in st:
        return 128 + st["signal"]
    return st.get("exitcode", 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
