"""``--ray ADDRESS`` against an existing multi-node Ray cluster (``tests/ray/cluster.py``: a
head and a worker node on 127.0.0.1, each its own raylet, one CPU each; real Ray, nothing
mocked): a sweep gives the local verdicts and schedules and runs on both nodes, a node
removed mid-sweep has its run retried on the surviving node, and ``chaos validate`` works
against the cluster. No process of the cluster is left afterwards."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from chaos.sweep import SweepReport, sweep
from replay.trace import read_trace
from tests.doc_pack import write_doc_pack
from tests.ray.cluster import LocalCluster, local_cluster
from tests.ray.packs import write_waiting_pack

ray = pytest.importorskip("ray")

from chaos.executor_ray import RayExecutor, connect, disconnect  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A fresh two-node cluster per test (about 3 s to start): one test removes a node."""
    assert not ray.is_initialized()
    with local_cluster(workers=1) as running:
        yield running


def _chaos(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=timeout
    )


def _node_of(worker: str) -> str:
    """``HOST node NODE pid PID`` -> NODE."""
    words = worker.split()
    assert "node" in words, worker
    return words[words.index("node") + 1]


def _same_run(trace: Path) -> tuple[Any, dict[str, Any]]:
    """A trace's schedule events and verdicts (what must not depend on where it ran)."""
    read = read_trace(trace)
    schedule = (read.schedule or {}).get("events", [])
    return schedule, {v["name"]: v["valid"] for v in read.verdicts}


async def test_a_sweep_on_the_cluster_gives_the_local_runs_on_both_nodes(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    seeds = list(range(6))
    here, there = tmp_path / "local", tmp_path / "cluster"
    here.mkdir()
    local = await sweep("payments", "golden", seeds, jobs=2, out_dir=here)
    argv = ["sweep", "payments", "--seeds", "0-5", "--ray", cluster.address, "--json",
            "--out-dir", str(there)]  # fmt: skip
    done = await trio.to_thread.run_sync(lambda: _chaos(*argv))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["executor"]["address"] == cluster.address
    assert (summary["runs"], summary["held"], summary["retried"]) == (6, 6, 0)
    rows = summary["seeds"]
    assert [row["seed"] for row in rows] == seeds
    assert [row["outcome"] for row in rows] == [r.outcome for r in local.results]
    for row, mine in zip(rows, local.results, strict=True):
        trace = Path(row["trace"])
        assert trace == there / f"golden-seed{row['seed']}.trace"  # written here
        assert mine.trace is not None
        assert _same_run(trace) == _same_run(mine.trace)
    assert any(_same_run(Path(row["trace"]))[0] for row in rows)  # some seed drew faults
    nodes = {_node_of(row["worker"]) for row in rows}
    assert nodes == {cluster.node_id(cluster.head), cluster.node_id(cluster.workers[0])}


def _run_of(pack: Path, seed: int) -> psutil.Process | None:
    """The process running ``seed`` (a Ray worker's child: its ``chaos run``, or the warm
    worker it keeps), by the pid the waiting pack wrote in ``control/started-SEED``."""
    try:
        return psutil.Process(int((pack / "control" / f"started-{seed}").read_text()))
    except (OSError, ValueError, psutil.Error):
        return None


def _raylet_of(run: psutil.Process) -> int:
    """The pid of the raylet whose worker runs ``run`` (worker's parent)."""
    worker = run.parent()
    assert worker is not None
    raylet = worker.parent()
    assert raylet is not None
    return raylet.pid


async def test_a_node_removed_mid_sweep_has_its_run_retried_on_the_other(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    pack = write_waiting_pack(tmp_path / "waiting")
    control, out = pack / "control", tmp_path / "out"
    out.mkdir()
    seeds = [10, 11, 12, 13]
    [gone] = cluster.workers
    report: list[SweepReport] = []
    assert connect(cluster.address)  # the loopback address, as given
    try:

        async def run() -> None:
            executor = RayExecutor(address=cluster.address)
            report.append(await sweep(str(pack), "golden", seeds, jobs=2, out_dir=out,
                                      executor=executor))  # fmt: skip

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            with trio.fail_after(180):  # one run in flight on each node (one CPU each)
                while len(list(control.glob("started-*"))) < 2:
                    await trio.sleep(0.05)
            started = sorted(int(p.name.split("-")[1]) for p in control.glob("started-*"))
            runs = {seed: _run_of(pack, seed) for seed in started}
            assert all(runs.values()), runs
            raylet = cluster.raylet_pid(gone)
            on_gone = [seed for seed, r in runs.items() if r and _raylet_of(r) == raylet]
            assert len(on_gone) == 1, (runs, on_gone)
            # The node lost whole (a machine gone): its raylet and every Ray worker on it
            # SIGKILLed. (Its raylet alone is not enough: a task in flight then still ends
            # on its worker, which returns the result straight to the caller.)
            workers = psutil.Process(cluster.raylet_pid(gone)).children()
            cluster.cluster.remove_node(gone, allow_graceful=False)
            for worker in workers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    worker.kill()
            for path in control.glob("started-*"):
                path.unlink()
            (control / "release").touch()
    finally:
        disconnect()
    [swept] = report
    summary = swept.to_json()
    assert [r.seed for r in swept.results] == seeds
    assert [r.outcome for r in swept.results] == ["held"] * len(seeds)
    [lost_seed] = on_gone
    by_seed = {r.seed: r for r in swept.results}
    lost = by_seed[lost_seed]
    assert (lost.attempts, len(lost.lost)) == (2, 1), lost
    assert "the worker was lost" in lost.lost[0]
    head = cluster.node_id(cluster.head)
    assert _node_of(lost.worker) == head, (lost.worker, head)  # run again on the survivor
    assert summary["retried"] >= 1
    assert summary["lost_workers"] == summary["retried"]  # at most one loss per seed here
    for result in swept.results:
        assert result.attempts <= 2
        assert result.trace == out / f"golden-seed{result.seed}.trace"
        assert read_trace(result.trace).end is not None
    # The run on the lost node (the process that ran it there: started-SEED now names the
    # survivor's, whose warm worker is kept) got SIGTERM from its dead worker and stopped.
    lost_run = runs[lost_seed]
    assert lost_run is not None
    with trio.fail_after(120):
        while _alive(lost_run):
            await trio.sleep(0.1)


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie (an orphan here may stay one: PID 1 does not reap)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_validate_on_the_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    # tally (docs/scenarios.md): a folder pack, valid with 2 held-out seeds; its golden,
    # variant and replay runs all go to the cluster, the traces come back here.
    pack = write_doc_pack(tmp_path / "tally")
    out = tmp_path / "out"
    done = _chaos("validate", str(pack), "--seeds", "2", "--replays", "2", "--json",
                  "--out-dir", str(out), "--ray", cluster.address)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert report["valid"] is True
    assert report["variants"]["no-dedupe"]["no_faults"]["verdicts"] == {"counted_once": True}
    for run in report["golden"]["runs"].values():
        assert Path(run["trace"]).parent == out
        assert Path(run["trace"]).is_file()
    assert list(out.glob("*.replay-*.trace"))  # the replays' traces came back


def test_leaving_a_cluster_this_process_started_leaves_its_nodes_running(
    cluster: LocalCluster,
) -> None:
    """``disconnect`` stops what a local instance ``connect`` started left running (its
    agents); a cluster this process started itself and joined by address is not its own."""
    nodes = [cluster.head, *cluster.workers]
    raylets = [psutil.Process(cluster.raylet_pid(node)) for node in nodes]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert connect(cluster.address)
    disconnect()
    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in raylets)
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert before <= after, sorted(before - after)
