"""Adversary: ignores SIGTERM and never exits. Expected: contained (ignored SIGTERM), 0."""

import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("consumer ready", flush=True)
while True:
    time.sleep(1)
