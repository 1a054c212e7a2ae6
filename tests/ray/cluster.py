"""A real multi-node Ray cluster on this machine, for the ``--ray ADDRESS`` tests and
bench/ray.py: Ray's own test harness (``ray.cluster_utils.Cluster``), a head node and worker
nodes, each its own raylet (and the head its GCS), all on 127.0.0.1, one CPU and a 100 MB
object store per node, no dashboard. Torn down on every exit path; every process it started
must be gone afterwards, and its session folder is removed."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

NODE_ARGS: dict[str, Any] = {
    "num_cpus": 1,
    "object_store_memory": 100 * 1024 * 1024,
    "node_ip_address": "127.0.0.1",
}


@dataclass
class LocalCluster:
    """The cluster (``ray.cluster_utils.Cluster``), its GCS address and its nodes."""

    cluster: Any
    address: str
    head: Any
    workers: list[Any] = field(default_factory=list)

    @staticmethod
    def node_id(node: Any) -> str:
        """What ``RunOutcome.worker`` names a node by (its id's first 12 hex digits)."""
        return str(node.node_id)[:12]

    @staticmethod
    def raylet_pid(node: Any) -> int:
        from ray._private import ray_constants

        [info] = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET]
        return int(info.process.pid)


def _descendants() -> list[psutil.Process]:
    found: list[psutil.Process] = psutil.Process().children(recursive=True)
    return found


@contextmanager
def local_cluster(workers: int = 1) -> Iterator[LocalCluster]:
    """A head node and ``workers`` worker nodes, one CPU each; stopped when the block ends
    (an error there too), and ``AssertionError`` if any of its processes is left."""
    from ray.cluster_utils import Cluster

    before = {p.pid for p in _descendants()}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"include_dashboard": False, **NODE_ARGS},
        shutdown_at_exit=False,
    )
    session: Path | None = None
    try:
        session = Path(cluster.head_node.get_session_dir_path())
        nodes = [cluster.add_node(**NODE_ARGS) for _ in range(workers)]
        cluster.wait_for_nodes()
        yield LocalCluster(cluster, str(cluster.address), cluster.head_node, nodes)
    finally:
        started = [p for p in _descendants() if p.pid not in before]
        cluster.shutdown()
        _gone, alive = psutil.wait_procs(started, timeout=30)
        for process in alive:
            process.kill()
        if session is not None:
            shutil.rmtree(session, ignore_errors=True)
        assert alive == [], f"the Ray cluster left {[p.pid for p in alive]} running"
        if session is not None:
            left = [
                p.pid
                for p in psutil.process_iter(["cmdline"])
                if session.name in " ".join(p.info["cmdline"] or [])
            ]
            assert left == [], f"processes of {session.name} left: {left}"


def main() -> None:
    """``python -m tests.ray.cluster [NODES]``: a cluster of NODES nodes (default 2: a head
    and a worker) on 127.0.0.1; prints its address and runs until Ctrl-C or end of stdin,
    then stops with every process it started."""
    import sys

    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    if nodes < 1:
        raise SystemExit("NODES must be at least 1")
    with local_cluster(workers=nodes - 1) as running:
        print(f"{nodes}-node Ray cluster at {running.address}", flush=True)
        print(f"   chaos sweep payments --seeds 0-5 --ray {running.address} --json", flush=True)
        try:
            sys.stdin.read()
        except KeyboardInterrupt:
            pass
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
