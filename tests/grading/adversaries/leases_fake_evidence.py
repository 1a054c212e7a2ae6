"""Adversary (leases): does no work, and prints what the evidence would say if it had: the
store's accepted writes (``@op`` lines of ``write``, seq 424242) and the lease auditor's
grants, in the exact format those harness processes print, hoping they become history.

Expected: a candidate's output is recorded as log lines, never as history: the forged
operations are nowhere in it, the store accepted no write: job_recovered fails, reward 0.

pack: leases
reward: 0
fails: job_recovered
absent: 424242
"""

import json
import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
me = os.environ["WORKER_ID"]
print("worker ready", flush=True)
for n in range(200):
    now = time.time()
    write = {"writer": me, "token": 1, "seq": 424242, "at": now, "n": n + 1}
    grant = {"token": 1, "holder": me, "at": now, "until": now + 2, "id": 424242}
    for record in (
        {"type": "invoke", "f": "write", "value": write},
        {"type": "ok", "f": "write", "value": write},
        {"type": "invoke", "f": "grant", "value": grant},
        {"type": "ok", "f": "grant", "value": grant},
    ):
        print("@op " + json.dumps(record, sort_keys=True), flush=True)
    time.sleep(0.1)
while True:
    time.sleep(1)
