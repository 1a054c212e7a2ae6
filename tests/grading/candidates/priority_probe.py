"""Probe: what CPU priority its start has, what it can pass on, and when it loses it.

Prints ``PRIO {json}`` lines (``tests/grading/test_start_priority.py`` reads them from the
trace): its own nice and scheduling flags at start, a thread's and a child process's nice,
whether it may clear SCHED_RESET_ON_FORK, raise its own priority or
run real-time, then (after its ready
line) how long until its nice is back to 0. Charges nothing; idles.
"""

import json
import os
import resource
import subprocess
import sys
import threading
import time


def report(what, **fields):
    print("PRIO " + json.dumps({"what": what, **fields}, sort_keys=True), flush=True)


def refused(call):
    try:
        call()
    except PermissionError:
        return True
    return False


report(
    "start",
    nice=os.getpriority(os.PRIO_PROCESS, 0),
    reset_on_fork=bool(os.sched_getscheduler(0) & os.SCHED_RESET_ON_FORK),
)
seen = {}
thread = threading.Thread(target=lambda: seen.update(nice=os.getpriority(os.PRIO_PROCESS, 0)))
thread.start()
thread.join()
child = subprocess.run(
    [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
    capture_output=True,
    text=True,
    check=False,
)
report("thread", nice=seen.get("nice"))
report("child", nice=int(child.stdout.strip() or "99"))
report(
    "refused",
    clear_flag=refused(lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))),
    raise_priority=refused(lambda: os.setpriority(os.PRIO_PROCESS, 0, -10)),
    realtime=refused(lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))),
    limits=[resource.getrlimit(resource.RLIMIT_NICE), resource.getrlimit(resource.RLIMIT_RTPRIO)],
)
ready_at = time.monotonic()
print("consumer ready", flush=True)
while os.getpriority(os.PRIO_PROCESS, 0) < 0 and time.monotonic() - ready_at < 10:
    time.sleep(0.01)
report(
    "after_ready",
    nice=os.getpriority(os.PRIO_PROCESS, 0),
    waited_s=round(time.monotonic() - ready_at, 3),
)
while True:
    time.sleep(1)
