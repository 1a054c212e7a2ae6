"""Benchmark: what the container path costs against the process path, in the same run.

The same echo server (Python, standard library) runs as a process and as a container, each
behind a link (the embedded proxy, no toxic), and the harness talks to it through the link:

1. round trip: ``--pings`` request/response exchanges of 64 bytes on one connection
   (median and p99 in microseconds);
2. throughput: ``--mib`` MiB sent and echoed back on one connection (MiB/s);
3. start: from the start call until the ready line, and a crash fault's kill + restart.

On the container path the proxy dials the server from inside the container's network
namespace (``ContainerService.dial``); on the process path from the harness's own. The
process path is the baseline, measured in the same run, alternately (``--rounds``).

Usage: python bench/containers.py [--pings 2000] [--mib 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# bench/replay.py would shadow the `replay` package: keep this folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import trio

from chaos.services import free_port, open_process_service, open_run_dir
from chaos.services.container import open_container
from chaos.services.images import check_images, daemon_available, python_image
from faults.proxy import open_proxy_server

ECHO = """
import socket, sys, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen(16)
print("echo ready", flush=True)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        data = c.recv(1 << 16)
        if not data:
            return c.close()
        c.sendall(data)
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
"""


async def measure(address: str, pings: int, mib: int) -> tuple[list[float], float]:
    host, _, port = address.rpartition(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        message = b"x" * 64
        rtts = []
        for _ in range(pings):
            started = time.perf_counter()
            await stream.send_all(message)
            got = 0
            while got < len(message):
                got += len(await stream.receive_some(1 << 16))
            rtts.append((time.perf_counter() - started) * 1e6)
        chunk = b"y" * (1 << 16)
        total = mib << 20
        started = time.perf_counter()

        async def send() -> None:
            for _ in range(total // len(chunk)):
                await stream.send_all(chunk)

        received = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            while received < total:
                received += len(await stream.receive_some(1 << 20))
        rate = mib / (time.perf_counter() - started)
    return rtts, rate


async def one_round(image: str, pings: int, mib: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    seen: dict[str, int] = {}

    def sink(service: str, stream: str, line: str) -> None:
        if "echo ready" in line:
            seen[service] = seen.get(service, 0) + 1

    def ready_after(name: str, n: int):  # type: ignore[no-untyped-def]
        async def probe() -> bool:
            return seen.get(name, 0) >= n

        return probe

    with open_run_dir():
        async with open_proxy_server(seed=0) as proxies:
            port = free_port()
            started = time.perf_counter()
            async with open_process_service(
                "proc", [sys.executable, "-c", ECHO, str(port)], log_sink=sink,
                ready=ready_after("proc", 1),
            ) as proc:  # fmt: skip
                start_s = time.perf_counter() - started
                link = proxies.create_proxy("to-proc", "127.0.0.1:0", f"127.0.0.1:{port}")
                rtts, rate = await measure(link.listen, pings, mib)
                started = time.perf_counter()
                await proc.kill()
                seen["proc"] = 0
                await proc.restart()
                restart_s = time.perf_counter() - started
            out["process"] = _row(rtts, rate, start_s, restart_s)
            started = time.perf_counter()
            async with open_container(
                "box", image, command=["python", "-c", ECHO, "8080"], log_sink=sink,
                ready=ready_after("box", 1),
            ) as box:  # fmt: skip
                start_s = time.perf_counter() - started
                link = proxies.create_proxy("to-box", "127.0.0.1:0", "127.0.0.1:8080")
                link.dialer = box.dial
                rtts, rate = await measure(link.listen, pings, mib)
                started = time.perf_counter()
                await box.kill()
                seen["box"] = 0
                await box.restart()
                restart_s = time.perf_counter() - started
            out["container"] = _row(rtts, rate, start_s, restart_s)
    return out


def _row(rtts: list[float], rate: float, start_s: float, restart_s: float) -> dict[str, float]:
    rtts = sorted(rtts)
    return {
        "rtt_median_us": statistics.median(rtts),
        "rtt_p99_us": rtts[int(len(rtts) * 0.99) - 1],
        "mib_s": rate,
        "start_s": start_s,
        "restart_s": restart_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    why = daemon_available()
    if why is not None:
        print(f"skipped: {why}")
        return
    image = python_image("chaos-bench-python")
    check_images([image])
    rows: dict[str, dict[str, list[float]]] = {"process": {}, "container": {}}
    for _ in range(args.rounds):
        got = trio.run(one_round, image.ref, args.pings, args.mib)
        for path, values in got.items():
            for key, value in values.items():
                rows[path].setdefault(key, []).append(value)
    print(f"container path against process path: {args.rounds} rounds, medians of rounds")
    print(f"   {'':16} {'process':>10} {'container':>10} {'container/process':>18}")
    for key, unit in (("rtt_median_us", "us"), ("rtt_p99_us", "us"), ("mib_s", "MiB/s"),
                      ("start_s", "s"), ("restart_s", "s")):  # fmt: skip
        a = statistics.median(rows["process"][key])
        b = statistics.median(rows["container"][key])
        print(f"   {key:16} {a:10.2f} {b:10.2f} {b / a:17.2f}x   ({unit})")
    a = statistics.median(rows["process"]["rtt_median_us"])
    b = statistics.median(rows["container"]["rtt_median_us"])
    print(f"   added round trip: {b - a:+.1f} us (median); throughput "
          f"{100 * (statistics.median(rows['container']['mib_s']) / statistics.median(rows['process']['mib_s']) - 1):+.1f} %")  # noqa: E501  # fmt: skip


if __name__ == "__main__":
    main()
