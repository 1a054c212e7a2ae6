"""Adversary (payments): the golden consumer, except that when it has been crashed and
restarted (a fault it could lose the seed to), it sabotages the harness's reading instead
of recovering: it drops ``charges.order_id``, which the settle poll and the final state
read. Before, a table the settle poll could not read made the run a harness error, and a
harness error was left out of the reward: 1.0 on the seeds it held, whatever happened on
the others ("turned 0.2 into 1.0").

Expected: an unreadable store is the candidate's failure (unreadable), and a seed in error
would count 0 anyway: seed 2 (a redelivery) holds, seed 25 (a crash) fails: reward 0.5.

pack: payments
golden: yes
seeds: 2, 25
reward: 0.5
unreadable: public.charges has no column 'order_id'
"""

import os
from pathlib import Path

from _probe import query, run_golden, say

marker = Path(os.environ["HOME"]) / "started-before"
if marker.exists():
    query(os.environ["PG_DSN"], "ALTER TABLE charges DROP COLUMN order_id CASCADE")
    say("adversary: restarted, so charges.order_id is gone")
marker.write_text("1")
run_golden()
