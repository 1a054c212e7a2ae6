"""Named random streams derived from a run seed.

Every random choice in the harness comes from ``derive_rng(seed, *names)``: the stream is a
pure function of the seed and the names, so the same seed gives the same draws on every
machine and every Python version (``random.Random`` seeded with an int is stable across
versions). No module calls the global ``random``.

A run seed is an integer from 0 to ``SEED_MAX`` (2**63-1) everywhere (CLI flags, seed lists,
fault schedules, traces): it round-trips through msgpack, JSON and any 64-bit signed integer.
``check_seed`` is the one place that says so. Ground floor: imports only ``ground.errors``.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from ground.errors import ConfigError

SEED_MAX = 2**63 - 1
"""The largest run seed: the largest msgpack/int64 integer that every reader takes."""


def check_seed(seed: Any, what: str = "seed") -> int:
    """``seed`` if it is an integer from 0 to ``SEED_MAX``; ConfigError naming ``what`` if not."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigError(f"{what} must be an integer, got {seed!r}")
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"{what} must be between 0 and 2**63-1, got {seed}")
    return seed


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
