"""Benchmark: the embedded proxy (empty toxic chain) against a direct loopback connection.

Prints, from one run on this machine, for three paths (direct; a plain Python forwarder,
the baseline the issue names; the embedded proxy):
  * throughput moving MB megabytes (MB/s, ratio to direct), and
  * 1-byte round trips (median and p99, µs added over direct).

The forwarder and the proxy run in their own processes (as a Toxiproxy server would); the
client, the sink and the echo server run in this one, identical for every path. Usage:

    python bench/proxy.py [--mb 200] [--round-trips 5000]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

_PROXY_CHILD = r"""
import sys, trio
from faults.proxy import open_proxy_server

async def main(upstream: str, busy_poll_us: float) -> None:
    async with open_proxy_server(seed=0, busy_poll_us=busy_poll_us) as server:
        proxy = server.create_proxy("bench", "127.0.0.1:0", upstream)
        print(proxy.listen.rsplit(":", 1)[1], flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)

trio.run(main, sys.argv[1], float(sys.argv[2]))
"""

#: The baseline the issue names: a plain Python forwarder (two blocking threads per
#: connection). What it costs here, in the same run, is "next to nothing" for a proxy.
_FORWARDER_CHILD = r"""
import socket, sys, threading

def pump(a, b):
    try:
        while data := a.recv(1 << 20):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

def serve(listener, upstream):
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(upstream)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(client, server), daemon=True).start()
        threading.Thread(target=pump, args=(server, client), daemon=True).start()

host, port = sys.argv[1].rsplit(":", 1)
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
threading.Thread(target=serve, args=(listener, (host, int(port))), daemon=True).start()
sys.stdin.read()
"""

BUF = 1 << 20


def _serve(handler: Callable[[socket.socket], object]) -> tuple[socket.socket, int]:
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


def _start_proxy(
    upstream_port: int, program: str = _PROXY_CHILD, *extra: str
) -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen(
        [sys.executable, "-c", program, f"127.0.0.1:{upstream_port}", *extra],
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
    parser.add_argument(
        "--cpu",
        type=int,
        default=None,
        help="pin every process to this CPU: measures each path's own cost per hop, without "
        "the cross-CPU wake-ups that dominate an idle VM's round trips",
    )
    parser.add_argument(
        "--busy-poll-us",
        type=float,
        default=150.0,
        help="also measure the proxy with this busy-poll budget (0: skip)",
    )
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # the children inherit it
        print(f"pinned to CPU {args.cpu}")
    total = args.mb * 1_000_000

    sink_listener, sink_port = _serve(_sink)
    echo_listener, echo_port = _serve(_echo)
    children = []
    paths: dict[str, tuple[int, int]] = {"direct": (sink_port, echo_port)}
    variants = [("forwarder", _FORWARDER_CHILD, ()), ("proxy", _PROXY_CHILD, ("0",))]
    if args.busy_poll_us:
        variants.append((f"proxy+bp{args.busy_poll_us:g}", _PROXY_CHILD, (str(args.busy_poll_us),)))
    for name, program, extra in variants:
        sink_child, sink_via = _start_proxy(sink_port, program, *extra)
        echo_child, echo_via = _start_proxy(echo_port, program, *extra)
        children += [sink_child, echo_child]
        paths[name] = (sink_via, echo_via)
    tps: dict[str, list[float]] = {name: [] for name in paths}
    rts: dict[str, list[float]] = {name: [] for name in paths}
    try:
        # Alternate the paths so a noisy neighbour hurts them alike.
        per_round = max(1, args.round_trips // args.repeat)
        for _ in range(args.repeat):
            for name, (sink_via, echo_via) in paths.items():
                tps[name].append(throughput(sink_via, total))
                rts[name] += round_trips(echo_via, per_round)
    finally:
        for child in children:
            _stop(child)
        sink_listener.close()
        echo_listener.close()

    def p99(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=100)[98]

    direct_tp = max(tps["direct"])
    direct_med = statistics.median(rts["direct"])
    print(f"throughput ({args.mb} MB, best of {args.repeat})")
    for name in paths:
        tp = max(tps[name])
        print(f"  {name:<14} {tp:8.0f} MB/s   ratio {tp / direct_tp:.2f} of direct")
    print(f"round trip, 1 byte ({len(rts['direct'])} samples per path)")
    for name in paths:
        med = statistics.median(rts[name])
        added = "" if name == "direct" else f"   added {med - direct_med:6.1f} µs"
        print(f"  {name:<14} median {med:6.1f} µs   p99 {p99(rts[name]):7.1f} µs{added}")
    proxy_added = statistics.median(rts["proxy"]) - direct_med
    forwarder_added = statistics.median(rts["forwarder"]) - direct_med
    print(
        f"proxy vs plain forwarder: throughput {max(tps['proxy']) / max(tps['forwarder']):.2f}x, "
        f"added round trip {proxy_added / max(forwarder_added, 1e-9):.2f}x"
    )
    print(
        "reference (Toxiproxy 2.12 on these machines): ~0.37 of direct and +55 µs round trip,"
        " i.e. ~0.5x the plain forwarder's throughput and ~7x its added round trip"
    )


if __name__ == "__main__":
    main()
