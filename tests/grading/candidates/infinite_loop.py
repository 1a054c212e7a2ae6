"""Adversary: spins forever and never says it is ready. Expected: contained (cpu), 0."""

while True:
    pass
