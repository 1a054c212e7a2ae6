"""Containers of runs that died: found by their labels, removed (``docker rm -f``).

The registry's reaper (``chaos.services.registry``) calls ``reap_run_containers`` for every
stale run, and ``chaos gc`` calls ``orphan_containers`` for runs whose registration is gone.
Both are no-ops (no Docker import, no connection) when no daemon socket exists.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from chaos.services.images import docker_client

LABEL_RUN = "chaos.run"
LABEL_REGISTRY = "chaos.registry"
LABEL_SERVICE = "chaos.service"


def _daemon_socket_present() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return True
    return Path(host[len("unix://") :] if host else "/var/run/docker.sock").exists()


def reap_run_containers(run_id: str) -> list[str]:
    """Remove every container labelled with ``run_id``; their names (short ids)."""
    return _remove_where([f"{LABEL_RUN}={run_id}"])


def orphan_containers(registry_path: Path, live: Callable[[str], bool]) -> list[tuple[str, str]]:
    """Remove containers of this registry whose run is not live (no registration); their
    (short id, run id)."""
    if not _daemon_socket_present():
        return []
    try:
        client = docker_client()
        found = client.api.containers(
            all=True, filters={"label": f"{LABEL_REGISTRY}={registry_path}"}
        )
    except Exception:
        return []
    removed = []
    for c in found:
        run_id = (c.get("Labels") or {}).get(LABEL_RUN, "")
        if run_id and live(run_id):
            continue
        with suppress(Exception):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed.append((c["Id"][:12], run_id or "?"))
    return removed


def _remove_where(labels: list[str]) -> list[str]:
    if not _daemon_socket_present():
        return []
    try:
        client = docker_client()
        found = client.api.containers(all=True, filters={"label": labels})
    except Exception:
        return []
    removed = []
    for c in found:
        with suppress(Exception):
            client.api.remove_container(c["Id"], force=True, v=True)
            removed.append(c["Id"][:12])
    return removed


__all__ = ["LABEL_REGISTRY", "LABEL_RUN", "orphan_containers", "reap_run_containers"]
