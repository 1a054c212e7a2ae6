"""The container tests need a Docker daemon (and root, to enter containers' namespaces).

Where none can be used they skip, saying why; under CI (``CI`` set) they fail instead: CI
installs and starts one (``.ci/run``), so a skip there would hide a broken path.
"""

from __future__ import annotations

import os

import pytest

from chaos.services.images import check_images, daemon_available, docker_client

LABEL = "chaos.registry"


def require_docker() -> None:
    why = (
        "not root: the harness cannot enter a container's network namespace"
        if os.geteuid() != 0
        else daemon_available()
    )
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the container tests, but: {why}")
    pytest.skip(f"no Docker daemon usable here: {why}")


@pytest.fixture(scope="session")
def docker_ok() -> None:
    require_docker()


@pytest.fixture(scope="session")
def payments_image(docker_ok: None) -> str:
    """The payments_docker pack's image, built here once per content (its tag's hash)."""
    from scenarios.payments_docker.scenario import IMAGE

    check_images([IMAGE])
    return IMAGE.ref


def chaos_containers(run_ids: set[str] | None = None) -> list[str]:
    """Containers chaos runs made that still exist (name and status): those of ``run_ids``,
    or of every run of this machine."""
    found = docker_client().api.containers(all=True, filters={"label": LABEL})
    if run_ids is not None:
        found = [c for c in found if (c.get("Labels") or {}).get("chaos.run") in run_ids]
    return [f"{c['Names'][0] if c.get('Names') else c['Id'][:12]} {c['Status']}" for c in found]
