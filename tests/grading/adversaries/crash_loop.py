"""Adversary (payments): prints its ready line, then dies (exit 1) right away, every time it
is started (the harness restarts it, with backoff, as a supervisor would), and after its
third start kills itself with SIGKILL at chosen moments: a candidate that fails loudly and
often, hoping the run fails as a harness error rather than as its own.

Expected: a candidate that crashes is a graded failure, never a harness error: the orders
are never charged (no_lost_messages), reward 0, no error.

pack: payments
reward: 0
fails: no_lost_messages
"""

import os
import signal
import sys
import time
from pathlib import Path

starts = Path(os.environ["HOME"]) / "starts"
count = int(starts.read_text()) + 1 if starts.exists() else 1
starts.write_text(str(count))
print("consumer ready", flush=True)
if count > 3:
    time.sleep(0.1 * count)
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(1)
