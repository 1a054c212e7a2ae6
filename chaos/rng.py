"""Named random streams derived from a run seed.

Every random choice in the harness comes from ``derive_rng(seed, *names)``: the stream is a
pure function of the seed and the names, so the same seed gives the same draws on every
machine and every Python version (``random.Random`` seeded with an int is stable across
versions). No module calls the global ``random``.
"""

from __future__ import annotations

import hashlib
import random


def derive_seed(seed: int, *names: object) -> int:
    """A 64-bit integer that depends only on ``seed`` and ``names`` (their ``str``)."""
    h = hashlib.blake2b(digest_size=8, person=b"chaos-rng")
    h.update(str(int(seed)).encode())
    for name in names:
        part = str(name).encode()
        h.update(len(part).to_bytes(4, "big"))
        h.update(part)
    return int.from_bytes(h.digest(), "big")


def derive_rng(seed: int, *names: object) -> random.Random:
    """A ``random.Random`` for the stream named ``names`` under ``seed``."""
    return random.Random(derive_seed(seed, *names))
