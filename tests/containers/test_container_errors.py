"""Bad input and failures on the container path: one line, the right exit code, nothing left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.services.images import docker_client

pytestmark = pytest.mark.docker

PACK = """
from chaos.context import RunContext
from chaos.scenario import Scenario
from invariants import History, Verdict, register
from scenarios.payments_docker.scenario import IMAGE


@register("nothing", pack="boxes")
def nothing(history: History, final_state) -> Verdict:
    return Verdict.holds("nothing", "nothing to check")


class Boxes(Scenario):
    id = "boxes"
    invariants = ("nothing",)
    images = (IMAGE, *{extra_images!r})

    async def setup(self, ctx: RunContext) -> None:
        ctx.add_link("app-link", "127.0.0.1:9")
        await ctx.start_container(
            "app", {image!r}, command={command!r}, ready_line="app ready", links=["app-link"]
        )

    async def workload(self, ctx: RunContext) -> None: ...

    async def settled(self, ctx: RunContext) -> bool:
        return True

    async def final_state(self, ctx: RunContext) -> dict:
        return {{}}


SCENARIO = Boxes()
"""

FAULTS = """
[golden]
horizon_s = 1.0
min_events = 1
max_events = 1
links = ["app-link"]

[[golden.templates]]
kind = "latency"
params = { latency_ms = [10, 20] }
duration_s = [0.2, 0.5]
"""


def write_pack(root: Path, *, image: str, command: list[str], extra_images: tuple[str, ...] = ()
               ) -> Path:  # fmt: skip
    folder = root / "boxes"
    folder.mkdir()
    text = PACK.format(image=image, command=command, extra_images=extra_images)
    (folder / "scenario.py").write_text(text)
    (folder / "faults.toml").write_text(FAULTS)
    return folder


def chaos(*args: str, cwd: Path, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "CHAOS_REGISTRY_DIR": str(cwd / "registry"), **(env or {})},
        check=False,
        timeout=300,
    )


def left_by(root: Path) -> list[str]:
    """Containers still there of runs registered under ``root``'s registry."""
    label = {"label": f"chaos.registry={root / 'registry'}"}
    return [c["Id"][:12] for c in docker_client().api.containers(all=True, filters=label)]


def test_a_missing_image_is_one_line_naming_it_exit_2(payments_image: str, tmp_path: Path
                                                      ) -> None:  # fmt: skip
    pack = write_pack(tmp_path, image="chaos-no-such-image:1", command=["true"],
                      extra_images=("chaos-no-such-image:1",))  # fmt: skip
    done = chaos("run", str(pack), "--seed", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "image chaos-no-such-image:1" in line
    assert "No such image" in line  # the daemon's own message
    assert not list(tmp_path.glob("traces/*"))  # refused before anything started


def test_an_undeclared_image_is_refused(payments_image: str, tmp_path: Path) -> None:
    pack = write_pack(tmp_path, image="busybox:latest", command=["true"])
    done = chaos("run", str(pack), "--seed", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is not declared in the scenario's images" in done.stderr


def test_no_daemon_is_one_clear_line_exit_2(tmp_path: Path) -> None:
    done = chaos("run", "payments_docker", "--seed", "1", cwd=tmp_path,
                 env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"chaos: error: no Docker daemon at unix://{tmp_path}/no-docker.sock")


def test_a_container_that_exits_before_its_ready_line_is_exit_3_and_leaves_nothing(
    payments_image: str, tmp_path: Path
) -> None:
    command = ["python", "-c", "import sys; print('boom', flush=True); sys.exit(3)"]
    pack = write_pack(tmp_path, image=payments_image, command=command)
    done = chaos("run", str(pack), "--seed", "1", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"container app ({payments_image}) exited with code 3 before it was ready" in line
    # the cause first (its last line), then where to read the rest (issue 22)
    assert "before it was ready: boom;" in line
    assert "(`chaos show " in line
    assert left_by(tmp_path) == []


def test_containers_of_a_sigkilled_run_are_reaped_by_chaos_gc(
    payments_image: str, tmp_path: Path
) -> None:
    command = ["python", "-c", "import time; time.sleep(600)"]  # never ready
    pack = write_pack(tmp_path, image=payments_image, command=command)
    registry = tmp_path / "registry"
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(registry)}
    harness = subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(pack), "--seed", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    api = docker_client().api
    label = {"label": f"chaos.registry={registry}"}
    try:
        deadline = time.monotonic() + 120  # a hang guard
        while len(api.containers(filters=label)) < 2:
            assert harness.poll() is None, "the run ended before its containers started"
            assert time.monotonic() < deadline, "no container started"
            time.sleep(0.1)
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    assert len(api.containers(all=True, filters=label)) == 2  # left running by the dead run
    gc = subprocess.run([sys.executable, "-m", "chaos", "gc"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert gc.returncode == 0, gc.stderr
    assert gc.stdout.count("removed container") == 2, gc.stdout
    assert "2 container(s)" in gc.stdout
    assert api.containers(all=True, filters=label) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signalled_run_removes_its_containers(
    payments_image: str, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    command = ["python", "-c", "import time; time.sleep(600)"]  # never ready
    pack = write_pack(tmp_path, image=payments_image, command=command)
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(tmp_path / "registry")}
    harness = subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(pack), "--seed", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120  # a hang guard
    while len(left_by(tmp_path)) < 2:
        assert harness.poll() is None, "the run ended before its containers started"
        assert time.monotonic() < deadline, "no container started"
        time.sleep(0.1)
    harness.send_signal(sig)
    _, err = harness.communicate(timeout=120)
    assert harness.returncode == code, err
    assert len(err.strip().splitlines()) == 1, err
    assert left_by(tmp_path) == []


def test_chaos_gc_removes_containers_whose_run_has_no_registration(tmp_path: Path) -> None:
    from chaos.services.images import check_images, holder_image

    from .conftest import require_docker

    require_docker()
    check_images([holder_image()])
    registry = tmp_path / "registry"
    registry.mkdir(mode=0o700)
    api = docker_client().api
    labels = {"chaos.registry": str(registry), "chaos.run": "1-2-3", "chaos.service": "lost"}
    no_network = api.create_host_config(network_mode="none")
    created = api.create_container(holder_image().ref, labels=labels, host_config=no_network)
    api.start(created["Id"])
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(registry)}
    gc = subprocess.run([sys.executable, "-m", "chaos", "gc"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert gc.returncode == 0, gc.stderr
    assert f"removed container {created['Id'][:12]} of unregistered run 1-2-3" in gc.stdout
    assert api.containers(all=True, filters={"id": created["Id"]}) == []
