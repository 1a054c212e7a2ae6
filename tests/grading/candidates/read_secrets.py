"""Adversary: tries to read the pack, the checkers, the traces and the held-out key (paths in
SECRETS below, filled in by the test), lists /dev/shm (where the harness keeps its run dirs)
and /proc for other processes' command lines (the workers' hold the seeds).
It prints what it could read; it charges nothing."""

import os
import signal
import sys
import time

SECRETS: list[str] = []  # the test writes the paths here

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
for path in SECRETS:
    try:
        if os.path.isdir(path):
            print(f"SECRET-READ {path}: {sorted(os.listdir(path))[:5]}", flush=True)
        else:
            with open(path, "rb") as f:
                print(f"SECRET-READ {path}: {f.read(32)!r}", flush=True)
    except OSError as exc:
        print(f"SECRET-DENIED {path}: {type(exc).__name__}", flush=True)
print(f"SHM-LIST {sorted(os.listdir('/dev/shm'))}", flush=True)  # the run dirs live there
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid not in ("1", str(os.getpid())):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                print(f"SECRET-READ /proc/{pid}/cmdline: {f.read(200)!r}", flush=True)
        except OSError:
            pass
print("consumer ready", flush=True)
while True:
    time.sleep(1)
