"""A candidate's site in the process sandbox, its setup: the box (its files on a tmpfs of its
own at root isolation, ``_box``) and the launcher's configuration (argv, environment,
rlimits, uid, namespace, cgroup and mount plan, read by ``_launch.py``).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

from chaos.sandbox import _mounts
from chaos.sandbox._layer import library_site
from chaos.sandbox._site_state import _SiteState
from chaos.sandbox._uids import lease_uid, tasks_of
from chaos.services import SkewFile
from ground.errors import ServiceError

_libc = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 2, 4, 32
#: How far above its cgroup's pids.max a candidate's RLIMIT_NPROC is set.
_NPROC_SLACK = 16


def _start_nice() -> int:
    """-5, or CHAOS_START_NICE (measuring only: 0 turns the boost off), kept in -20..0."""
    try:
        return max(-20, min(0, int(os.environ.get("CHAOS_START_NICE", "-5"))))
    except ValueError:
        return -5


#: The nice of a candidate's main thread while it starts (as root; 0 after, see
#: ``_SiteWatch.end_boost``).
START_NICE = _start_nice()


class _SiteSetup(_SiteState):
    """The site's box and the launcher's configuration."""

    def _make_box(self, faketime: Path | None) -> str | None:
        """The candidate's box (``_box``), filled; at root isolation on a tmpfs of its own,
        resized once filled so that what the candidate writes gets ``file_size_mb``.
        Returns libfaketime's name in it, if copied."""
        path = self.box.path
        path.mkdir(mode=0o755)
        if self.isolation in ("root", "uid"):
            self.uid = lease_uid()
        limit = self.limits.file_size_mb << 20
        if self.root:  # its libraries: the process's read-only layer, bound in (_layer)
            files = [s for s, _ in self.candidate.program.files()]
            lent = sum(source.stat().st_size + 4096 for source in files)
            self._mount_box(f"size={limit + 2 * lent + (16 << 20)},mode=0755")
        owner = (self.uid.uid, self.uid.gid) if self.uid else None
        name = self.box.fill(self.candidate, faketime, owner, libraries=not self.root)
        if self.box_mounted:
            st = os.statvfs(path)
            self.box_base = (st.f_blocks - st.f_bfree) * st.f_frsize
            self._mount_box(f"size={self.box_base + limit}", remount=True)
        return name

    def _mount_box(self, data: str, remount: bool = False) -> None:
        flags = _MS_NOSUID | _MS_NODEV | (_MS_REMOUNT if remount else 0)
        box = os.fsencode(self.box.path)
        if _libc.mount(b"tmpfs", box, b"tmpfs", flags, data.encode()) != 0:
            err = os.strerror(ctypes.get_errno())
            raise ServiceError(f"sandbox: cannot mount the box's tmpfs: {err}")
        self.box_mounted = True

    def _config(
        self, env: dict[str, str], skew: SkewFile, faketime: str | None, shared: str | None
    ) -> dict[str, Any]:
        limits = self.limits
        program = self.candidate.program
        entry = f"{self.box.places(self.root).program}/{program.entry or program.path.name}"
        # its view of the box: fixed paths in a root of its own, else the box's own; the
        # base interpreter through the box's link (which `python3` on its PATH finds too),
        # the task's libraries from the box's site folder
        places = self.box.places(self.root)
        argv = [places.python, "-s", entry] if program.kind == "python" else [entry]
        child_env = {
            "PATH": f"{places.bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": places.scratch,
            "TMPDIR": places.tmp,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": places.site,
            **env,
        }
        if faketime is not None:
            child_env.update(
                LD_PRELOAD=f"{places.run}/{faketime}",
                FAKETIME_TIMESTAMP_FILE=f"{places.clock}/{skew.path.name}",
                FAKETIME_NO_CACHE="1",
                DONT_FAKE_MONOTONIC="1",
                FAKETIME_FORCE_MONOTONIC_FIX="0",
            )
            if shared is not None:
                child_env["FAKETIME_SHARED"] = shared
        cpu = int(limits.cpu_s) + 1
        rlimits: dict[str, list[int]] = {
            "cpu": [cpu, cpu + 1],
            "fsize": [limits.file_size_mb << 20] * 2,
            "nofile": [limits.open_files] * 2,
            "core": [0, 0],
            # no raising its own CPU priority nor real-time scheduling, whatever the machine's
            # limits.conf gave the harness (its start's boost is the launcher's, as root)
            "nice": [0, 0],
            "rtprio": [0, 0],
        }
        if self.uid is not None and self.cgroup is not None and self.cgroup.pids is not None:
            # Its cgroup's pids.max refuses the fork past the limit and counts it
            # (``pids_refused``), whatever the moment the monitor looks; the rlimit only
            # backs it up. At the same value the rlimit, which the kernel checks first and
            # which counts the uid's tasks wherever they are (a zombie not yet reaped),
            # could refuse with the cgroup not full: no count, a fork bomb spinning at
            # it until its CPU limit (the monitor then asks the uid's count: _site_watch).
            rlimits["nproc"] = [limits.processes + _NPROC_SLACK] * 2
        elif self.uid is not None:
            rlimits["nproc"] = [limits.processes] * 2
        else:  # the harness's uid: its own processes and threads count too
            rlimits["nproc"] = [tasks_of(os.getuid()) + limits.processes] * 2
        if self.cgroup is None or not self.cgroup.limits_memory:
            rlimits["as"] = [limits.memory_mb << 20] * 2
        config: dict[str, Any] = {
            "mode": self.isolation,
            "status": str(self.status_path),
            "contained": str(self.flag),
            "netns": self.netns.path if self.netns else None,
            "cgroups": self.cgroup.procs_files if self.cgroup else [],
            "uid": self.uid.uid if self.uid else None,
            "gid": self.uid.gid if self.uid else None,
            "rlimits": rlimits,
            # its start is the graded run's critical path: a higher priority until it is
            # ready (root only: the harness takes it back, ``end_boost``)
            "start_nice": START_NICE if self.uid is not None else 0,
            "cwd": places.scratch,
            "argv": argv,
            "env": child_env,
        }
        if self.root:
            config["root"] = _mounts.mount_plan(
                root_dir=self._root_dir(), box=self.box, hidden=self._hidden(),
                site=library_site(self.candidate.libraries),
            )  # fmt: skip
        return config

    def _root_dir(self) -> Path:  # the mount point of the candidate's root tmpfs
        root = self.dir / "root"
        root.mkdir(mode=0o755)
        return root

    def _hidden(self) -> tuple[Path, ...]:
        project = Path(__file__).resolve().parents[2]
        return (*self.candidate.hidden, project, self.ctx.scenario.path, self.ctx.run_dir)
