"""A starter worker: it starts, says it is ready, and never takes the lease.

It runs and does nothing useful: the job never runs, so ``job_recovered`` fails. Replace it
with a worker that follows TASK.md.
"""

from __future__ import annotations

import os
import time


def main() -> None:
    print(f"worker ready ({os.environ.get('WORKER_ID', '?')})", flush=True)
    while True:
        time.sleep(1)  # TODO: take the lease in PG_DSN, then run the job against STORE_URL


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
