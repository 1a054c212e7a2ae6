"""The zygote process (run as a script: ``python .../_zygote_main.py MODULE...``).

Standalone on purpose: it imports nothing of the harness, so a forked service starts with
the modules a fresh ``python -m`` would have plus the preloaded ones, nothing else. Never
starts a thread or an event loop. Protocol on fd 0 (a SOCK_SEQPACKET Unix socket):

    zygote -> harness   {"ready": true} | {"error": "..."}           once, after the imports
    harness -> zygote   {"argv": [...], "env": {...}, "cwd": "..."} + 2 fds (stdout, stderr)
    zygote -> harness   {"pid": N} | {"error": "..."}

Each request: fork an intermediate, which forks the service and exits at once, so the
service is re-parented to the harness (a child subreaper): it waits on it as on its own
child. See chaos/services/zygote.py.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import runpy
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
_SIGKILL = 9


def _fail_fast(message: str) -> NoReturn:  # pragma: no cover - runs in the forked service
    try:
        os.write(2, f"chaos zygote: {message}\n".encode())
    finally:
        os._exit(1)


def _become_service(
    request: dict[str, object], fds: list[int], intermediate: int, harness: int
) -> Callable[[], None]:  # pragma: no cover - runs in the forked service
    """In the forked service: detach, wait to be the harness's, set up fds/env/cwd/argv."""
    os.setsid()  # as the exec path's start_new_session
    while os.getppid() == intermediate:  # it exits at once; then the harness is our parent
        time.sleep(0.0001)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != harness:  # the harness died meanwhile (or is no subreaper)
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass
    env = request["env"]
    argv = request["argv"]
    assert isinstance(env, dict)
    assert isinstance(argv, list)
    neutral = os.environ.get("FAKETIME_TIMESTAMP_FILE")
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    if "FAKETIME_TIMESTAMP_FILE" not in os.environ and neutral is not None:
        # libfaketime is loaded in every fork: one without a skew file keeps the neutral
        # "+0" file at the C level only (its own children do not load libfaketime).
        os.putenv("FAKETIME_TIMESTAMP_FILE", neutral)
    cwd = request.get("cwd")
    if isinstance(cwd, str):
        os.chdir(cwd)
    sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first
    module = str(argv[2])
    sys.argv = ["-m", *(str(a) for a in argv[3:])]

    def run() -> None:
        runpy.run_module(module, run_name="__main__", alter_sys=True)

    return run


def serve(sock: socket.socket, harness: int) -> Callable[[], None]:
    """Answer fork requests until the harness closes the socket (then exit); returns only
    in a forked service, with the function that runs it."""
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 2)
        except InterruptedError:  # pragma: no cover
            continue
        if not msg:
            os._exit(0)
        try:
            request = json.loads(msg)
            argv = request["argv"]
            if len(fds) != 2 or len(argv) < 3 or argv[1] != "-m":
                raise ValueError("a request needs argv [python, -m, MODULE, ...] and 2 fds")
        except (ValueError, KeyError, TypeError) as exc:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": f"bad request: {exc}"}).encode())
            continue
        read, write = os.pipe()
        intermediate = os.fork()
        if intermediate == 0:  # pragma: no cover - the intermediate
            pid = -1
            try:
                os.close(read)
                me = os.getpid()
                pid = os.fork()
            except BaseException:
                os._exit(1)
            if pid == 0:  # the service
                os.close(write)
                try:
                    return _become_service(request, fds, me, harness)
                except BaseException as exc:
                    _fail_fast(f"cannot start {argv[2]}: {exc!r}")
            try:
                os.write(write, str(pid).encode())
            finally:
                os._exit(0)
        os.close(write)
        for fd in fds:
            os.close(fd)
        os.waitpid(intermediate, 0)  # the service is the harness's from here on
        data = os.read(read, 64)
        os.close(read)
        answer = {"pid": int(data)} if data else {"error": "the fork failed"}
        sock.send(json.dumps(answer).encode())


def main() -> Callable[[], None]:
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    harness = os.getppid()
    sys.path[0] = os.getcwd()  # as `python -m`, not this script's folder
    try:
        for name in sys.argv[1:]:
            importlib.import_module(name)
        if threading.active_count() != 1:
            raise RuntimeError("a preloaded module started a thread: cannot fork safely")
        # What the imports made lives as long as the zygote: out of the collector's sight,
        # a forked service's collections never walk (and so never copy) those pages.
        gc.collect()
        gc.freeze()
    except BaseException as exc:  # report anything, then exit
        sock.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        os._exit(1)
    sock.send(json.dumps({"ready": True}).encode())
    return serve(sock, harness)


if __name__ == "__main__":
    # Only a forked service gets past main(): it runs its module here, at top level, so
    # SystemExit, uncaught exceptions, atexit and thread shutdown behave as in `python -m`.
    main()()
