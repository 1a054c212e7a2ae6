"""Start a child that dies with the harness: a parent-death signal, set from the right thread.

::

    spawn(argv, pdeathsig=SIGKILL) ─► Popen in the *calling* thread ─► setpriv --pdeathsig
                                                                          └─► exec argv

Linux sends a child its parent-death signal (``PR_SET_PDEATHSIG``) when the *thread* that
forked it exits, not the process. ``trio.lowlevel.open_process`` forks from a worker thread,
and trio's idle worker threads exit after a few seconds, which would kill every service
early. So children are forked here from the thread that runs trio (the main thread, which
lives as long as the harness), and waited on with a pidfd.

The signal is set in the child just before the exec of the real program, after any change of
user (a credential change clears it): by util-linux's ``setpriv --pdeathsig`` when it is
installed, else by a ``preexec_fn`` (which makes Python fork instead of vfork).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path

import trio

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.02
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL


@cache
def _setpriv() -> str | None:
    """util-linux's setpriv if it knows ``--pdeathsig`` (2.33 and later), else None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        done = subprocess.run(
            [path, "--help"], capture_output=True, timeout=5, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return path if b"--pdeathsig" in done.stdout else None


def _preexec(sig: int) -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def resolve_executable(program: str, env: Mapping[str, str]) -> str:
    """The absolute path ``program`` runs as (FileNotFoundError / PermissionError if none),
    so a missing program fails at spawn, not as the exit code of the wrapper."""
    if os.sep in program:
        if not os.path.isfile(program):
            raise FileNotFoundError(2, "No such file or directory", program)
        if not os.access(program, os.X_OK):
            raise PermissionError(13, "Permission denied", program)
        return program
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", program)
    return found


class Child:
    """A spawned child: pid, exit code, output pipes as trio streams, and a cancellable wait."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdout: trio.lowlevel.FdStream | None,
        stderr: trio.lowlevel.FdStream | None,
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self.stderr = stderr
        try:
            self._pidfd: int | None = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # Linux < 5.3: poll instead
            self._pidfd = None
        self._wait_lock = trio.Lock()

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while the child runs."""
        return self._popen.poll()

    async def wait(self) -> int:
        """Wait (cancellably) until the child exits and is reaped; return its exit code."""
        async with self._wait_lock:
            if self._popen.poll() is None and self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
            while self._popen.poll() is None:  # noqa: ASYNC110 - no pidfd: nothing to wait on
                await trio.sleep(_POLL_S)
            code = self._popen.wait()
            if self._pidfd is not None:
                fd, self._pidfd = self._pidfd, None
                os.close(fd)
            return code

    def send_signal(self, sig: int) -> None:
        """Signal the child unless it has been reaped (its pid may belong to another)."""
        self._popen.send_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def with_pdeathsig(
    argv: Sequence[str], pdeathsig: int | None, env: Mapping[str, str]
) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` (its program resolved) and a ``preexec_fn`` for ``subprocess.Popen`` so that
    the child gets ``pdeathsig`` when the forking thread ends: through ``setpriv`` when
    installed (no preexec_fn: Popen may vfork), else a preexec_fn."""
    argv = [str(a) for a in argv]
    argv[0] = resolve_executable(argv[0], env)
    if pdeathsig is None:
        return argv, None
    helper = _setpriv()
    if helper is not None:
        name = signal.Signals(pdeathsig).name.removeprefix("SIG")
        return [helper, "--pdeathsig", name, "--", *argv], None
    sig = int(pdeathsig)

    def preexec() -> None:  # pragma: no cover - runs in the forked child
        _preexec(sig)

    return argv, preexec


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: int | None = DEVNULL,
    stdout: int | None = None,
    stderr: int | None = None,
    start_new_session: bool = False,
    user: int | None = None,
    group: int | None = None,
    extra_groups: list[int] | None = None,
    pdeathsig: int | None = signal.SIGKILL,
) -> Child:
    """Fork and exec ``argv`` from the calling thread; ``pdeathsig`` reaches it when the
    harness dies. ``stdout``/``stderr`` = ``PIPE`` gives trio streams (``Child.stdout``).
    Raises OSError when the program cannot be started."""
    environ = dict(os.environ if env is None else env)
    argv, preexec = with_pdeathsig(argv, pdeathsig, environ)
    pipes: dict[str, tuple[int, int]] = {}
    try:
        for stream, wanted in (("stdout", stdout), ("stderr", stderr)):
            if wanted == PIPE:
                pipes[stream] = os.pipe()
        popen = subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=pipes["stdout"][1] if "stdout" in pipes else stdout,
            stderr=pipes["stderr"][1] if "stderr" in pipes else stderr,
            env=environ,
            cwd=cwd,
            start_new_session=start_new_session,
            user=user,
            group=group,
            extra_groups=extra_groups,
            preexec_fn=preexec,
        )
    except BaseException:
        for read, write in pipes.values():
            os.close(read)
            os.close(write)
        raise
    for _read, write in pipes.values():
        os.close(write)
    out = trio.lowlevel.FdStream(pipes["stdout"][0]) if "stdout" in pipes else None
    err = trio.lowlevel.FdStream(pipes["stderr"][0]) if "stderr" in pipes else None
    return Child(popen, out, err)
