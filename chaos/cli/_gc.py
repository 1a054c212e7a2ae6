"""``chaos gc``: reap what dead runs left (processes, run dirs, shm files, sandbox cgroups,
containers) and say what."""

from __future__ import annotations

import json

from chaos.services.registry import GcReport, collect


def gc_command(as_json: bool) -> None:
    """Collect every stale registration (and marked orphans); print what was removed."""
    report = collect(orphans=True)
    if as_json:
        print(json.dumps(report.to_json(), sort_keys=True))
        return
    print_report(report)


def print_report(report: GcReport) -> None:
    for reaped in report.reaped:
        print(f"run {reaped.run_id} ({reaped.command}): {reaped.reason}")
        for killed in reaped.killed:
            print(f"  killed pid {killed['pid']}: {killed['command']}")
        for segment in reaped.sysv:
            print(f"  removed SysV shared memory segment {segment}")
        for path in reaped.files:
            print(f"  removed {path}")
        for path in reaped.dirs:
            print(f"  removed {path}/")
        for container in reaped.containers:
            print(f"  removed container {container}")
        for cgroup in reaped.cgroups:
            print(f"  removed cgroup {cgroup}")
        if reaped.empty:
            print("  nothing was left")
    for orphan in report.orphans:
        if "container" in orphan:
            print(f"removed container {orphan['container']} of unregistered run {orphan['run']}")
            continue
        pid, run, command = orphan["pid"], orphan["run"], orphan["command"]
        print(f"killed pid {pid} of unregistered run {run}: {command}")
    for error in report.errors:
        print(f"chaos gc: warning: {error}")
    runs = len(report.reaped)
    live = f"; {report.live} run(s) in progress left alone" if report.live else ""
    if runs or report.orphans:
        n_killed = sum(len(r.killed) for r in report.reaped) + len(report.orphans)
        dirs = sum(len(r.dirs) for r in report.reaped)
        files = sum(len(r.files) + len(r.sysv) for r in report.reaped)
        containers = sum(len(r.containers) for r in report.reaped)
        containers += sum(1 for o in report.orphans if "container" in o)
        cgroups = sum(len(r.cgroups) for r in report.reaped)
        n_killed -= sum(1 for o in report.orphans if "container" in o)
        boxes = f", {containers} container(s)" if containers else ""
        boxes += f", {cgroups} cgroup(s)" if cgroups else ""
        print(
            f"reaped {runs} dead run(s): {n_killed} process(es), {dirs} dir(s), "
            f"{files} shm file(s)/segment(s){boxes}{live}"
        )
    else:
        print(f"nothing to reap in {report.registry}{live}")
