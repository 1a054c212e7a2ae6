"""Benchmark: the embedded proxy (empty toxic chain) against a direct loopback connection.

Prints, from one run on this machine:
  * throughput moving TOTAL_MB through the proxy vs directly (MB/s, ratio), and
  * 1-byte round trips through the proxy vs directly (median and p99, µs added).

The proxy runs in its own process (as a Toxiproxy server would); the client, the sink and
the echo server run in this one, identical for both paths. Usage:

    python bench/proxy.py [--mb 200] [--round-trips 5000]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time

_PROXY_CHILD = r"""
import sys, trio
from faults.proxy import open_proxy_server

async def main(upstream: str) -> None:
    async with open_proxy_server(seed=0) as server:
        proxy = server.create_proxy("bench", "127.0.0.1:0", upstream)
        print(proxy.listen.rsplit(":", 1)[1], flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)

trio.run(main, sys.argv[1])
"""

BUF = 1 << 20


def _serve(handler: object) -> tuple[socket.socket, int]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return listener, port


def _sink(conn: socket.socket) -> None:
    """Read a 16-byte decimal length, then that many bytes; answer b'k'."""
    with conn:
        header = b""
        while len(header) < 16:
            header += conn.recv(16 - len(header))
        remaining = int(header)
        buf = bytearray(BUF)
        while remaining > 0:
            n = conn.recv_into(buf)
            if not n:
                return
            remaining -= n
        conn.sendall(b"k")


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def throughput(port: int, total: int) -> float:
    """MB/s moving ``total`` bytes to the sink at ``port``."""
    payload = memoryview(bytes(BUF))
    with socket.create_connection(("127.0.0.1", port)) as s:
        start = time.perf_counter()
        s.sendall(b"%16d" % total)
        sent = 0
        while sent < total:
            chunk = payload[: min(BUF, total - sent)]
            s.sendall(chunk)
            sent += len(chunk)
        assert s.recv(1) == b"k"
        elapsed = time.perf_counter() - start
    return total / elapsed / 1e6


def round_trips(port: int, n: int) -> list[float]:
    """Microseconds per 1-byte round trip to the echo server at ``port``."""
    samples = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(200):
            s.sendall(b"x")
            s.recv(1)
        for _ in range(n):
            t = time.perf_counter()
            s.sendall(b"x")
            s.recv(1)
            samples.append((time.perf_counter() - t) * 1e6)
    return samples


def _start_proxy(upstream_port: int) -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen(
        [sys.executable, "-c", _PROXY_CHILD, f"127.0.0.1:{upstream_port}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def _stop(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="megabytes per throughput run")
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5, help="alternating rounds per path")
    args = parser.parse_args()
    total = args.mb * 1_000_000

    sink_listener, sink_port = _serve(_sink)
    echo_listener, echo_port = _serve(_echo)
    sink_proxy, sink_proxy_port = _start_proxy(sink_port)
    echo_proxy, echo_proxy_port = _start_proxy(echo_port)
    try:
        # Alternate the two paths so a noisy neighbour hurts both alike.
        direct_tps, proxy_tps, direct_rt, proxy_rt = [], [], [], []
        per_round = max(1, args.round_trips // args.repeat)
        for _ in range(args.repeat):
            direct_tps.append(throughput(sink_port, total))
            proxy_tps.append(throughput(sink_proxy_port, total))
            direct_rt += round_trips(echo_port, per_round)
            proxy_rt += round_trips(echo_proxy_port, per_round)
        direct_tp, proxy_tp = max(direct_tps), max(proxy_tps)
    finally:
        _stop(sink_proxy)
        _stop(echo_proxy)
        sink_listener.close()
        echo_listener.close()

    def p99(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=100)[98]

    d_med, p_med = statistics.median(direct_rt), statistics.median(proxy_rt)
    print(f"throughput ({args.mb} MB, best of {args.repeat})")
    print(f"  direct   {direct_tp:8.0f} MB/s")
    print(f"  proxy    {proxy_tp:8.0f} MB/s   ratio {proxy_tp / direct_tp:.2f} of direct")
    print(f"round trip, 1 byte ({len(direct_rt)} samples per path)")
    print(f"  direct   median {d_med:6.1f} µs   p99 {p99(direct_rt):6.1f} µs")
    print(
        f"  proxy    median {p_med:6.1f} µs   p99 {p99(proxy_rt):6.1f} µs   "
        f"added median {p_med - d_med:5.1f} µs, ratio {p_med / d_med:.2f}"
    )
    print("reference (Toxiproxy 2.12, measured on these machines): ~0.37 of direct, +55 µs")


if __name__ == "__main__":
    main()
