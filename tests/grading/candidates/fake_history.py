"""Adversary: prints history lines claiming every order was charged, and charges nothing.
Expected: its lines are log lines, never history; no_lost_messages fails; seed graded 0."""

import json
import signal
import sys
import time

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("consumer ready", flush=True)
for i in range(1, 31):
    order = f"o-{i:03d}"
    for kind in ("invoke", "ok"):
        print("@op " + json.dumps({"type": kind, "f": "charge", "value": order}), flush=True)
    print("@op " + json.dumps({"type": "ok", "f": "publish", "value": order}), flush=True)
while True:
    time.sleep(1)
