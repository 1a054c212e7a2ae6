"""Adversary: writes 10 GB to its scratch directory. Expected: contained (file size), 0."""

print("consumer ready", flush=True)
chunk = b"x" * (1 << 20)
with open("big.bin", "wb") as f:
    for _ in range(10 * 1024):
        f.write(chunk)
