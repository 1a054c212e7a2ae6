"""Container images: the Docker client, the up-front image check, and images built here.

A scenario declares the images its containers run (``Scenario.images``): a reference
(``"myorg/gateway:1.4"``), or an ``Image`` that knows how to build itself when the daemon
lacks it. ``check_images`` runs before anything of a run starts: no daemon, or an image the
daemon does not have and nothing can build, is one line and exit 2 (``ConfigError``).

CI has no registry, so the project builds what it needs from files on this machine:

- ``holder_image()``: ``FROM scratch`` plus a static ``pause`` compiled from ``_pause.c``;
  it holds a container's network namespace across restarts (see ``chaos.services.container``).
- ``python_image(...)``: ``FROM scratch`` plus this interpreter (its prefix without
  ``site-packages`` and tests), the named distributions and what they require, every shared
  library those need (``ldd``), and optional application files under ``/app``.

Tags carry a hash of what went in (file names, sizes and times for the interpreter, bytes
for application files), so an image is built once per content and rebuilt when it changes.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.services.clock import libfaketime_library
from ground.errors import ConfigError, ServiceError

if TYPE_CHECKING:
    import docker

_PAUSE_SOURCE = Path(__file__).resolve().with_name("_pause.c")
_SKIPPED_STDLIB = {
    "site-packages",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
}
_client: docker.DockerClient | None = None
_client_lock = threading.Lock()
_build_lock = threading.Lock()


def docker_client() -> docker.DockerClient:
    """The Docker client of this process (``DOCKER_HOST`` or the default socket); one line
    and exit 2 (``ConfigError``) when no daemon answers."""
    global _client
    with _client_lock:
        if _client is not None:
            return _client
        try:
            import docker
        except ImportError:  # pragma: no cover - a dependency of the project
            raise ConfigError("the docker Python package is not installed") from None
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        _probe_unix_socket(where)
        try:
            client = docker.from_env(timeout=120)
            client.ping()
        except Exception as exc:  # docker raises DockerException, requests errors, OSError
            raise ConfigError(
                f"no Docker daemon at {where}: {_reason(exc)} (start dockerd, or set DOCKER_HOST)"
            ) from None
        _client = client
        return client


def _probe_unix_socket(where: str) -> None:
    """Connect to a ``unix://`` daemon socket once ourselves: docker's client leaks its
    socket when the connection fails (a non-root user, no daemon), ours is closed."""
    if not where.startswith("unix://"):
        return
    path = where.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(path)
        except OSError as exc:
            raise ConfigError(
                f"no Docker daemon at {where}: {exc.strerror or exc} "
                "(start dockerd, or set DOCKER_HOST)"
            ) from None


def _reason(exc: BaseException) -> str:
    """The daemon's own message, on one line."""
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    match = re.search(r"\((?:'|\")?([^()]*?Error\([^()]*\)[^()]*)", text)
    text = match.group(1) if match and len(text) > 200 else text
    return " ".join(str(text).split())[:300]


def daemon_available() -> str | None:
    """None when a Docker daemon answers, else why not (for tests that need one)."""
    try:
        docker_client()
    except ConfigError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Image:
    """An image a scenario runs: its reference, and how to build it when it is missing."""

    ref: str
    build: Callable[[docker.DockerClient], None] | None = None

    def __str__(self) -> str:
        return self.ref


def image_ref(image: str | Image) -> str:
    return image.ref if isinstance(image, Image) else image


def check_images(images: Iterable[str | Image]) -> None:
    """Every image present (or built now); else ConfigError naming it with the daemon's
    message. Raises ConfigError too when no daemon answers."""
    wanted = list(images)
    if not wanted:
        return
    import docker.errors

    client = docker_client()
    for image in wanted:
        ref = image_ref(image)
        if not isinstance(ref, str) or not ref.strip():
            raise ConfigError(f"bad image reference {ref!r}")
        try:
            client.images.get(ref)
            continue
        except docker.errors.ImageNotFound as exc:
            if not isinstance(image, Image) or image.build is None:
                raise ConfigError(f"image {ref}: {_reason(exc)}") from None
        except docker.errors.APIError as exc:
            raise ConfigError(f"image {ref}: {_reason(exc)}") from None
        with _build_lock:
            try:
                client.images.get(ref)
            except docker.errors.ImageNotFound:
                if isinstance(image, Image) and image.build is not None:
                    image.build(client)


# -- building from files on this machine ---------------------------------------------------


def _build(client: docker.DockerClient, tag: str, dockerfile: str, files: Mapping[str, Path]
           ) -> None:  # fmt: skip
    """``docker build`` of a context holding ``dockerfile`` and ``files`` (context path ->
    host file, symlinks followed)."""
    import docker.errors

    with tempfile.TemporaryFile() as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            data = dockerfile.encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for name, source in sorted(files.items()):
                info = tar.gettarinfo(str(source), arcname=name)
                if source.is_symlink() or info.issym():
                    info = tar.gettarinfo(str(source.resolve()), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                if info.isreg():
                    with open(source, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        context.seek(0)
        try:
            client.images.build(
                fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False
            )
        except (docker.errors.BuildError, docker.errors.APIError) as exc:
            raise ServiceError(f"building image {tag}: {_reason(exc)}") from None


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def holder_image() -> Image:
    """The image that holds a container's network namespace: a static ``pause``."""
    digest = hashlib.sha256(_PAUSE_SOURCE.read_bytes()).hexdigest()[:16]
    ref = f"chaos-harness-pause:{digest}"

    def build(client: docker.DockerClient) -> None:
        cc = _compiler()
        if cc is None:
            raise ConfigError("building the image chaos-harness-pause needs a C compiler (cc)")
        with tempfile.TemporaryDirectory() as tmp:
            binary = Path(tmp) / "pause"
            done = subprocess.run(
                [cc, "-static", "-Os", "-o", str(binary), str(_PAUSE_SOURCE)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["failed"])[-1]
                raise ConfigError(f"building the image {ref}: cc: {last}")
            _build(
                client,
                ref,
                'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n',
                {"pause": binary},
            )

    return Image(ref, build)


def _elf_dependencies(files: Iterable[Path]) -> set[Path]:
    """The shared libraries (as the loader names them) that ``files`` need."""
    found: set[Path] = set()
    for file in files:
        done = subprocess.run(["ldd", str(file)], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            match = re.search(r"(/\S+) \(0x", line)
            if match:
                found.add(Path(match.group(1)))
    return found


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _interpreter_files() -> dict[str, Path]:
    """This interpreter's files (image path -> host path), stdlib without tests."""
    prefix = Path(sys.base_prefix).resolve()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    files: dict[str, Path] = {}
    executable = Path(sys.executable).resolve()
    files[str(executable)] = executable
    for name in ("python3", "python"):
        files[str(prefix / "bin" / name)] = executable
    for lib in (prefix / "lib").glob("libpython*.so*"):
        files[str(lib)] = lib
    stdlib = prefix / "lib" / version
    for root, dirs, names in os.walk(stdlib):
        if Path(root) == stdlib:
            dirs[:] = [d for d in dirs if d not in _SKIPPED_STDLIB and not d.startswith("config-")]
        for name in names:
            path = Path(root) / name
            files[str(path)] = path
    return files


def python_image(
    name: str,
    *,
    libraries: tuple[str, ...] = (),
    app: Mapping[str, Path] | None = None,
    extra_elves: Iterable[Path] = (),
) -> Image:
    """An image of this Python with ``libraries`` (and their requirements) installed, and
    ``app`` (path under /app -> host file) copied in; its tag ``<name>:<content hash>``."""
    from chaos.sandbox._python import library_entries

    files = _interpreter_files()
    entries = library_entries(libraries)
    for entry in entries:
        paths = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file()]
        for path in paths:
            files[str(path)] = path
    # The folders the libraries live in (a virtualenv's site-packages is not on the image's
    # own interpreter's path): on PYTHONPATH after the app.
    site_dirs = sorted(
        {str(e.parent.parent if e.parent.name == "__pycache__" else e.parent) for e in entries}
    )
    python_path = ":".join(["/app", *site_dirs])
    app = dict(app or {})
    h = hashlib.sha256(f"{sys.version}\0{sorted(libraries)}\0{python_path}\0".encode())
    for target, source in sorted(files.items()):
        st = source.stat()
        h.update(f"{target}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for target, source in sorted(app.items()):
        h.update(f"/app/{target}\0".encode() + source.read_bytes() + b"\0")
    extra = list(extra_elves)
    with suppress(ServiceError):  # what libfaketime needs, so clock skew works inside
        extra.append(libfaketime_library())
    for path in extra:
        h.update(f"{path}\0".encode())
    ref = f"{name}:{h.hexdigest()[:16]}"
    bin_dir = Path(sys.base_prefix).resolve() / "bin"

    def build(client: docker.DockerClient) -> None:
        elves = [p for p in set(files.values()) if p.suffix == ".so" or ".so." in p.name]
        elves = [p for p in elves if _is_elf(p)] + [Path(sys.executable).resolve(), *extra]
        for lib in _elf_dependencies(elves):
            files[str(lib)] = lib
        context = {f"rootfs{target}": source for target, source in files.items()}
        context.update({f"rootfs/app/{t}": s for t, s in app.items()})
        dockerfile = (
            "FROM scratch\n"
            "COPY rootfs/ /\n"
            f"ENV PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 "
            f"PYTHONPATH={python_path} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1\n"
            "WORKDIR /app\n"
        )
        _build(client, ref, dockerfile, context)

    return Image(ref, build)


__all__ = [
    "Image",
    "check_images",
    "daemon_available",
    "docker_client",
    "holder_image",
    "image_ref",
    "python_image",
]
