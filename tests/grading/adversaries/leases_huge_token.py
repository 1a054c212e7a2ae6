"""Adversary (leases): worker-2 (not the holder) sends the store writes under a fencing
token of 2**64 (and a ``seq`` of 2**70), then floods it with writes (under a token it was
never granted: each one decided is fenced). The store took any integer and recorded the
write, and the harness's trace could not hold the number: the run ended in a harness error
("the machine is broken", exit 3) that any candidate could cause when it was about to
fail; had it been recorded, a checker that could not read it said "unknown", which the
grade could not parse (an internal error of the whole grade). And every write the store
decides is an op pair in the harness's memory, as many as the worker can send. The workers
are golden otherwise.

Expected: the store refuses a number past a 64-bit integer (400) and a key's writes past
20 a second (429), neither decided nor recorded: each PROBE refused, the golden's
reward, 1.0.

pack: leases
golden: yes
reward: 1.0
probes: refused
"""

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from _probe import attempt, in_background, run_golden, say


def write(body: object) -> None:
    request = urllib.request.Request(
        os.environ["STORE_URL"] + "/write", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Authorization", f"Bearer {os.environ['STORE_KEY']}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=5):
        pass


def one_write() -> int:
    try:  # under a token the lease never had: fenced (409) when decided
        write({"token": -1, "seq": 1})
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def flood() -> None:
    """200 writes at once (a burst no load slows below the store's rate): refused if any
    of them was answered 429."""
    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(lambda _: one_write(), range(200)))
    if 429 in codes:
        raise RuntimeError(f"429 to {codes.count(429)} of 200 writes")


def attacks() -> None:
    time.sleep(3)
    attempt("token-2**64", lambda: write({"token": 2**64, "seq": 1}))
    attempt("seq-2**70", lambda: write({"token": None, "seq": 2**70}))
    attempt("flood-of-writes", flood)
    say("adversary: done")


if os.environ["WORKER_ID"] == "worker-2":  # not the holder: its own key's writes only
    in_background(attacks)
run_golden()
