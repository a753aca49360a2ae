#!/usr/bin/env python3
"""A plain TCP exchange, for bench/mpi/netem.sh: the link's own time for what
the all-reduce moves at N = 2, without MPI.

  tcp_exchange.py serve ADDRESS BYTES      (in one namespace)
  tcp_exchange.py connect ADDRESS BYTES    (in the other) -> milliseconds

Both sides send BYTES to each other at once over one connection, as the
two ranks do in each half of the all-reduce, 7 times; `connect` prints the
median time of one exchange (from a one-byte go that both sides wait for to
the end of both transfers), in milliseconds.
"""
import socket
import statistics
import sys
import threading
import time

PORT = 47001  # inside the bench's own network namespaces
ROUNDS = 7


def main(argv):
    if len(argv) != 4 or argv[1] not in ("serve", "connect"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    role, address, size = argv[1], argv[2], int(argv[3])
    if role == "serve":
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, PORT))
        listener.listen(1)
        conn, _ = listener.accept()
    else:
        deadline = time.monotonic() + 10
        while True:  # until the other side listens
            try:
                conn = socket.create_connection((address, PORT))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = b"\0" * size
    times = []
    for _ in range(ROUNDS):
        conn.sendall(b"g")
        if conn.recv(1) != b"g":
            raise SystemExit("tcp_exchange.py: the other side went away or is out of step")
        start = time.perf_counter()
        sender = threading.Thread(target=conn.sendall, args=(payload,))
        sender.start()
        received = 0
        while received < size:
            chunk = conn.recv(min(1 << 20, size - received))  # not the next round's go
            if not chunk:
                raise SystemExit("tcp_exchange.py: the other side went away")
            received += len(chunk)
        sender.join()
        times.append(time.perf_counter() - start)
    if role == "connect":
        print("%.2f" % (statistics.median(times) * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
