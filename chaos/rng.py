"""Old path of the named random streams, now ``ground.rng``: each name warns once used,
naming its new home, for one release (CHANGELOG.md, 0.2.0)."""

from ground._moved import moved

__getattr__ = moved(
    __name__, dict.fromkeys(["SEED_MAX", "check_seed", "derive_seed", "derive_rng"], "ground.rng")
)
