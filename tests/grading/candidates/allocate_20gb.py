"""Adversary: allocates (and touches) 20 GB. Expected: contained (memory), seed graded 0."""

import time

print("consumer ready", flush=True)
hog = bytearray(20 * 2**30)
time.sleep(3600)
