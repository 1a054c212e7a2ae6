"""The process sandbox's launcher: the trusted first process of a sandboxed candidate.

Run by the harness as ``python -I -S _launch.py CONFIG`` (standard library only: it never
imports the harness, so it starts in a few milliseconds and sees nothing of the project).
CONFIG is a JSON file the harness wrote (root-only in root mode). Three processes::

    L  launcher (this process, the service's leader; host namespaces, trusted)
    |  joins the run's network namespace, unshares pid/ipc/uts namespaces, forks C
    '- C  init, pid 1 of the new pid namespace (root mode only; trusted): joins the cgroup,
       |  unshares mount and cgroup namespaces, builds the private mount tree (pivot_root),
       |  mounts a /proc that shows G only its own uid's processes, forwards signals to G
       '- G  the candidate: rlimits, no_new_privs, its own uid/gid, scrubbed env, execve

L forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 to C, C to G. When G exits, C
exits too (the kernel then kills whatever G left in the pid namespace), L writes G's end to
the status file and stays idle until the harness stops it: the service never "exits before
it was ready" in the harness's eyes, so a crashing candidate is a graded failure, never a
harness error. In uid mode (root without namespaces) and user mode (not root) there is no
C: L forks G directly (in uid mode G still takes its own uid and joins the cgroup).

Status file: one JSON object per line, ``{"launcher": pid, "event": ...}``; events
``started`` (G's pid), ``exit`` (G's code or signal), ``gone`` (nothing of this start runs
any more: C's or G's end), ``refused`` (the candidate was contained
earlier in this run: it is not started again), ``error`` (setup failed, with the message).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import resource
import signal
import sys
import time
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41}
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
    "nice": resource.RLIMIT_NICE,
    "rtprio": resource.RLIMIT_RTPRIO,
}

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """The sandbox could not be built (reported as an ``error`` event)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _b(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data) or None),
        f"mount {source} on {target}",
    )


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, nstype), f"setns {path}")
    finally:
        os.close(fd)


def pivot_root(new: str, old: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(_libc.syscall(number, _b(new), _b(old)), "pivot_root")


class Status:
    """Appends events to the status file the harness reads."""

    def __init__(self, path: str, launcher: int) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.launcher = launcher

    def write(self, event: str, **fields: Any) -> None:
        record = {"launcher": self.launcher, "event": event, "t": time.time(), **fields}
        os.write(self.fd, (json.dumps(record, sort_keys=True) + "\n").encode())


def idle() -> None:
    """Wait until the harness stops this process (SIGTERM/SIGINT/SIGHUP: exit 0)."""
    for sig in FORWARDED:
        signal.signal(sig, lambda *_: os._exit(0))
    while True:
        signal.pause()


def wait_status(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return status
        except ChildProcessError:
            return 0


def describe(status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {"signal": sig, "signame": signal.Signals(sig).name}
    return {"code": os.WEXITSTATUS(status)}


def forward_to(pid: int) -> None:
    def forward(sig: int, _frame: Any) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)


def build_root(cfg: dict[str, Any]) -> None:
    """In a fresh mount namespace: a tmpfs root holding only what the config lists."""
    root = cfg["root"]
    new = root["dir"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for op in root["ops"]:
        kind, target = op["op"], new + op["path"]
        if kind == "dir":
            os.makedirs(target, mode=op.get("mode", 0o755), exist_ok=True)
            os.chmod(target, op.get("mode", 0o755))
        elif kind == "symlink":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(op["target"], target)
        elif kind == "bind":
            source = op["source"]
            if os.path.isdir(source):
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if not os.path.exists(target):
                    os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
            mount(source, target, None, MS_BIND | MS_REC)
            flags = MS_BIND | MS_REMOUNT | MS_NOSUID
            if not op.get("dev"):
                flags |= MS_NODEV
            if not op.get("rw"):
                flags |= MS_RDONLY
            mount(None, target, None, flags)
        elif kind == "tmpfs":
            os.makedirs(target, exist_ok=True)
            flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if op.get("ro") else 0)
            mount("tmpfs", target, "tmpfs", flags, op.get("data", "mode=0755"))
        elif kind == "proc":
            os.makedirs(target, exist_ok=True)
            mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, op.get("data", ""))
        else:
            raise SetupError(f"unknown mount op {kind!r}")
    old = new + "/.oldroot"
    os.makedirs(old, exist_ok=True)
    pivot_root(new, old)
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    os.rmdir("/.oldroot")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def boost_start(nice: int) -> None:
    """While still root: this thread (the candidate's main thread once it execs) gets
    ``nice`` (a higher priority) for its start, which the harness takes back when the start
    is over. SCHED_RESET_ON_FORK first, so no thread or process it creates inherits the
    boost; without CAP_SYS_NICE it can neither clear that flag nor raise its own priority.
    If the flag cannot be set, no boost (an unboosted start is only slower)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER | os.SCHED_RESET_ON_FORK, os.sched_param(0))
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def become_candidate(cfg: dict[str, Any]) -> None:
    """In G, just before exec: cgroup (without C), limits, no new privileges, its own user,
    its directory."""
    if cfg["mode"] != "root":
        for procs in cfg["cgroups"]:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
    for name, (soft, hard) in cfg["rlimits"].items():
        resource.setrlimit(RLIMITS[name], (soft, hard))
    if cfg.get("start_nice"):
        boost_start(cfg["start_nice"])
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if cfg.get("uid") is not None:
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    # after the uid change, which clears it: if the launcher dies, so does the candidate
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.umask(0o077)
    os.chdir(cfg["cwd"])
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)


def exec_candidate(cfg: dict[str, Any]) -> None:
    """G: become the candidate and exec it; never returns."""
    try:
        become_candidate(cfg)
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    except BaseException as exc:  # the candidate's stderr: its program could not start
        os.write(2, f"sandbox: cannot start {cfg['argv'][0]}: {exc}\n".encode())
    os._exit(127)


def init(cfg: dict[str, Any], status: Status) -> None:
    """C: pid 1 of the candidate's pid namespace; exits with G's status when G ends."""
    try:
        for procs in cfg["cgroups"]:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        # a cgroup namespace rooted at the one it joined: /proc/self/cgroup reads "/"
        unshare(CLONE_NEWNS | CLONE_NEWCGROUP)
        build_root(cfg)
        _libc.sethostname(b"sandbox", 7)
    except (OSError, SetupError) as exc:
        status.write("error", message=str(exc))
        os._exit(126)
    child = os.fork()
    if child == 0:
        exec_candidate(cfg)
    forward_to(child)
    status.write("started", pid=child)
    while True:
        try:
            pid, code = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            status.write("exit", **describe(code))
            os._exit(os.WEXITSTATUS(code) if os.WIFEXITED(code) else 128 + os.WTERMSIG(code))


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    status = Status(cfg["status"], os.getpid())
    if os.path.exists(cfg["contained"]):
        status.write("refused")
        idle()
    try:
        if cfg.get("netns"):
            setns(cfg["netns"], CLONE_NEWNET)
        if cfg["mode"] == "root":
            unshare(CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
    except (OSError, SetupError) as exc:
        status.write("error", message=str(exc))
        idle()
    child = os.fork()
    if child == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if cfg["mode"] == "root":
            init(cfg, status)
        else:
            exec_candidate(cfg)
    forward_to(child)
    if cfg["mode"] != "root":
        status.write("started", pid=child)
    code = wait_status(child)
    if cfg["mode"] != "root":
        status.write("exit", **describe(code))
    status.write("gone", **describe(code))
    idle()


if __name__ == "__main__":
    main()
