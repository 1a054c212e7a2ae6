"""A candidate (payments) that leaves behind whatever it can, and first says what an earlier
run left it (tests/grading/test_warm_graded.py grades it twice on one warm worker).

At start it looks for, and then leaves: a file in every folder it may write (``/tmp``, its
home and temp folders, ``/dev/shm``), a table in its database, a detached process (its own
session, ``chaos-leftover`` in its command line); it prints its database roles with their
oids (a role left from an earlier run would keep its oid) and its clock against the
database's. Then the golden consumer (``golden/`` beside it) does the work: reward 1.
"""

import os
import subprocess
import sys
import time

from _probe import query, run_golden, say

MARK = "chaos-leftover"
dsn = os.environ["PG_DSN"]
seen = []

folders = ["/tmp", os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), "/dev/shm"]
for folder in dict.fromkeys(os.path.realpath(f) for f in folders if f):
    path = os.path.join(folder, MARK)
    if os.path.exists(path):
        seen.append(f"file {path}")
    try:
        with open(path, "w") as stream:
            stream.write("left by an earlier run\n")
    except OSError:
        pass

if query(dsn, "SELECT to_regclass('public.chaos_leftover')")[0][0] is not None:
    seen.append("table chaos_leftover")
try:
    query(dsn, "CREATE TABLE chaos_leftover (x int); INSERT INTO chaos_leftover VALUES (1)")
except Exception as exc:
    say(f"NOTE no table: {exc}")

for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            cmdline = stream.read()
    except OSError:
        continue
    if MARK.encode() in cmdline and int(pid) != os.getpid():
        seen.append(f"process {pid}")
subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)", MARK],
    start_new_session=True,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)

roles = query(
    dsn, "SELECT rolname, oid FROM pg_roles WHERE NOT rolsuper AND rolname NOT LIKE 'pg\\_%'"
)
say("ROLES " + ",".join(f"{name}={oid}" for name, oid in roles))
skew = float(query(dsn, "SELECT extract(epoch FROM clock_timestamp())")[0][0]) - time.time()
say(f"CLOCK {skew:.3f}")
say("SEEN " + (", ".join(seen) or "nothing"))
run_golden()
