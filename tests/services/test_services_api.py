"""The public surface of chaos.services, ports and the run dir."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import chaos.services
from chaos.services import default_run_parent, free_port, open_run_dir, tcp_accepting


def test_every_exported_name_exists() -> None:
    missing = [name for name in chaos.services.__all__ if not hasattr(chaos.services, name)]
    assert missing == []


async def test_free_port_is_bindable_and_probe_sees_listeners() -> None:
    port = free_port()
    assert not await tcp_accepting("127.0.0.1", port)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert await tcp_accepting("127.0.0.1", port)


def test_run_dir_is_removed_even_when_the_run_fails(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match=r"^run failed$"),  # propagated, not swallowed
        open_run_dir(prefix="x-", parent=tmp_path) as run,
    ):
        (run / "sub").mkdir()
        (run / "sub" / "f").write_text("x")
        raise RuntimeError("run failed")
    assert run.name.startswith("x-")
    assert list(tmp_path.iterdir()) == []


def test_run_parent_can_be_chosen_by_environment(tmp_path: Path, monkeypatch: object) -> None:

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setenv("CHAOS_RUN_DIR", str(tmp_path))
    assert default_run_parent() == tmp_path
    with open_run_dir() as run:
        assert run.parent == tmp_path
