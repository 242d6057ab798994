#!/usr/bin/env python3
"""A TCP transfer checked by hash, for the ipoib two-host pair.

    tcp-check.py serve ADDR PORT        accept one connection, read to EOF,
                                        answer "BYTES SHA256"
    tcp-check.py send ADDR PORT MB      send MB MiB of seeded random bytes
                                        (made and hashed 1 MiB at a time),
                                        check the answer, print the rate
"""
import hashlib
import random
import socket
import sys
import time


def serve(addr, port):
    s = socket.create_server((addr, port))
    s.settimeout(600)
    c, _ = s.accept()
    c.settimeout(180)
    h = hashlib.sha256()
    n = 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.sendall(f"{n} {h.hexdigest()}\n".encode())
    c.close()


def send(addr, port, mb):
    rng = random.Random(7)
    h = hashlib.sha256()
    for _ in range(60):
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(1)
    else:
        sys.exit(f"tcp-check: cannot connect to {addr}:{port}")
    c.settimeout(180)
    t0 = time.monotonic()
    for _ in range(mb):
        chunk = rng.randbytes(1 << 20)
        h.update(chunk)
        c.sendall(chunk)
    c.shutdown(socket.SHUT_WR)
    want = f"{mb << 20} {h.hexdigest()}"
    got = c.makefile().readline().strip()
    dt = time.monotonic() - t0
    if got != want:
        sys.exit(f"tcp-check: {addr}:{port} received {got!r}, sent {want!r}")
    print(f"tcp-check: {mb} MiB to {addr}:{port} in {dt:.2f} s, {mb * 8 / dt:.1f} Mbit/s, sha256 ok")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
