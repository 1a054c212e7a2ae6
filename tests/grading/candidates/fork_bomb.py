"""Adversary: a fork bomb. Expected: contained (processes), seed graded 0."""

import os

print("consumer ready", flush=True)
while True:
    try:
        os.fork()
    except OSError:
        pass
