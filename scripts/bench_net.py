#!/usr/bin/env python3
"""Network broker benchmark pieces (loopback only).

  bench_net.py server ADDR PORT            serve: 'bulk' streams BYTES of zeros, 'ping' answers 1 byte
  bench_net.py bulk  PROXY|direct HOST PORT BYTES   MB/s of one transfer
  bench_net.py conns PROXY|direct HOST PORT N       p50/p90 connect+first-byte latency in ms over N sequential connections
  bench_net.py idle  PROXY HOST PORT N SECONDS      hold N idle tunnels open for SECONDS

PROXY is host:port of the broker's HTTP CONNECT listener inside the sandbox; 'direct' dials
the server itself (from the host, for the baseline).
"""
import os
import socket
import sys
import threading
import time


def serve(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(2048)
    print("ready", flush=True)

    def handle(c):
        try:
            cmd = b""
            while not cmd.endswith(b"\n"):
                b = c.recv(64)
                if not b:
                    return
                cmd += b
            parts = cmd.split()
            if parts[0] == b"bulk":
                left = int(parts[1])
                chunk = bytes(1 << 20)
                while left > 0:
                    n = c.send(chunk[: min(left, len(chunk))])
                    left -= n
            elif parts[0] == b"ping":
                c.sendall(b"!")
            elif parts[0] == b"idle":
                c.recv(1)
        finally:
            c.close()

    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def dial(proxy, host, port):
    if proxy == "direct":
        return socket.create_connection((host, int(port)))
    ph, pp = proxy.rsplit(":", 1)
    c = socket.create_connection((ph, int(pp)))
    c.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = c.recv(1)
        if not b:
            raise SystemExit("proxy closed the connection")
        head += b
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit("proxy refused: " + head.decode(errors="replace").splitlines()[0])
    return c


def bulk(proxy, host, port, nbytes):
    nbytes = int(nbytes)
    c = dial(proxy, host, port)
    t = time.perf_counter()
    c.sendall(f"bulk {nbytes}\n".encode())
    got = 0
    buf = bytearray(1 << 20)
    while got < nbytes:
        n = c.recv_into(buf)
        if n == 0:
            break
        got += n
    dt = time.perf_counter() - t
    print(f"{got / dt / 1e6:.0f}")


def conns(proxy, host, port, n):
    lat = []
    for _ in range(int(n)):
        t = time.perf_counter()
        c = dial(proxy, host, port)
        c.sendall(b"ping\n")
        c.recv(1)
        lat.append((time.perf_counter() - t) * 1e3)
        c.close()
    lat.sort()
    print(f"{lat[len(lat) // 2]:.3f} {lat[int(len(lat) * 0.9)]:.3f}")


def idle(proxy, host, port, n, seconds):
    held = []
    for _ in range(int(n)):
        c = dial(proxy, host, port)
        c.sendall(b"idle\n")
        held.append(c)
    print(f"holding {len(held)}", flush=True)
    time.sleep(float(seconds))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"server": serve, "bulk": bulk, "conns": conns, "idle": idle}[cmd](*args)
