"""A candidate's site in the process sandbox: ``_Site`` starts the candidate (box, network,
cgroup, launcher configuration, then the launcher as a managed process whose output and
readiness it follows) and ends it (SIGTERM and ``term_s``, then everything it had removed).
Its parts: ``_site_state`` (what it holds), ``_site_setup``, ``_site_net``, ``_site_watch``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import uuid
from contextlib import suppress
from pathlib import Path

import trio

from chaos.sandbox._cgroup import create_cgroup
from chaos.sandbox._detect import BypassDetector, endpoint
from chaos.sandbox._site_net import _SiteNet
from chaos.sandbox._site_setup import _MNT_DETACH, _libc, _SiteSetup
from chaos.sandbox._site_watch import _SiteWatch
from chaos.sandbox._uids import SHARED_FOLDERS, remove_owned
from chaos.sandbox.candidate import IGNORED_SIGTERM
from chaos.services import (
    ManagedProcess,
    SkewFile,
    libfaketime_library,
    open_process_service,
    registry,
)
from chaos.services._netns import NetNamespace
from chaos.services.ready import ReadyLine
from ground.errors import ServiceError
from invariants.history import SERVICE_PREFIX

LAUNCHER = Path(__file__).resolve().with_name("_launch.py")
_REAP_PATIENCE_S = 15.0
_MAX_LOG_LINES = 20_000


class _Site(_SiteWatch, _SiteNet, _SiteSetup):
    """One candidate in one run: everything the process sandbox made for it."""

    # -- setup --------------------------------------------------------------------------

    async def start(
        self, env: dict[str, str], ready_line: str | None, wait: bool
    ) -> ManagedProcess:
        stack = self.ctx.stack
        stack.push_async_callback(self._cleanup)  # first in, last out: after the process
        if self.isolation == "uid":  # its box is reached by path
            self.dir.chmod(0o711)
        try:
            faketime: Path | None = libfaketime_library()
        except ServiceError:
            faketime = None
        faketime_name = self._make_box(faketime)
        skew = SkewFile(self.box.clock / "faketime")
        links = self._candidate_links(env)
        self.inbound = self._inbound_links(env, links)
        proxies = self.ctx.proxies.proxies
        self.detector = BypassDetector(  # its links' sockets need no server's client list
            self._dependencies(), links={endpoint(proxies[n].listen) for n in links}
        )
        for proxy in self.ctx.proxies.proxies.values():
            stack.callback(proxy.on_connection(self._proxied))
        if self.root:
            self.netns = NetNamespace()
            self._listen(links)
            for name in self.inbound:  # the candidate serves them inside its namespace
                proxy = self.ctx.proxies.proxies[name]
                proxy.dialer = self.netns.dial
                stack.callback(setattr, proxy, "dialer", None)
        if self.uid is not None:
            limits = self.limits
            registration = registry.current()
            self.cgroup = create_cgroup(
                f"chaos-{uuid.uuid4().hex[:12]}",
                limits.memory_mb << 20,
                limits.processes,
                registration.add_cgroup if registration is not None else None,
            )
        shared = None
        if not self.root:
            # the machine's /dev/shm: libfaketime would make a pair per candidate process,
            # left behind by every crash; one pair of its own, removed however it ends
            # (with a root of its own, its /dev/shm is a private tmpfs)
            owner = (self.uid.uid, self.uid.gid) if self.uid else None
            shared = stack.enter_context(registry.open_faketime_shared("candidate", owner))
        config = self._config(env, skew, faketime_name, shared)
        path = self.dir / "launch.json"
        path.write_text(json.dumps(config))
        path.chmod(0o600)

        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        nursery.start_soon(self._monitor)
        for sock, what in self.tripwires:
            nursery.start_soon(self._tripwire, sock, what)

        holder: list[ManagedProcess] = []
        ready_at = self.ready_at = ReadyLine(ready_line)

        def sink(service: str, stream: str, line: str) -> None:
            if ready_at.saw(line):
                self.end_boost(ready_at.start)
            if stream == "stderr":
                self.stderr_tail = [*self.stderr_tail[-19:], line]
            self.lines += 1
            if self.lines <= _MAX_LOG_LINES:  # never an @op: a candidate writes no evidence
                self.ctx.recorder.record(
                    f"{SERVICE_PREFIX}{service}", "info", "log", line[:2000], stream=stream
                )
            elif self.lines == _MAX_LOG_LINES + 1:
                self.ctx.recorder.record(
                    f"{SERVICE_PREFIX}{service}", "info", "log",
                    f"(output truncated after {_MAX_LOG_LINES} lines)", stream=stream,
                )  # fmt: skip

        async def ready() -> bool:
            process = holder[0] if holder else None
            start = process.starts if process else 1
            launcher = process.pid if process else None
            since = self.start_times.setdefault(start, trio.current_time())
            if ready_at.ready(start):
                return True
            if self.report.contained or launcher in self.gone:
                self._give_up(start, "it ended before it printed its ready line")
                return True
            if trio.current_time() - since > self.limits.ready_s:
                self._give_up(start, f"no ready line within {self.limits.ready_s:g} s")
                return True
            return False

        process = await stack.enter_async_context(
            open_process_service(
                self.name,
                [sys.executable, "-I", "-S", str(LAUNCHER), str(path)],
                log_sink=sink,
                ready=ready,
                ready_timeout=self.limits.ready_s + 30,
                faketime=skew,
                on_exit=self._on_exit,
                stop_grace=self.limits.term_s + 1,
                wait_ready=False,
            )
        )
        holder.append(process)
        ready_at.attach(process)
        self.process = process
        stack.push_async_callback(self._stop)
        if wait:
            await process.ready()
        return process

    # -- the end ------------------------------------------------------------------------

    async def _stop(self) -> None:
        """SIGTERM, ``term_s`` to exit, else contained; runs before the service is closed."""
        self.stopping = True
        process = self.process
        with trio.CancelScope(shield=True):
            self._read_status()
            if process is None or not process.running or process.pid in self.gone:
                return
            if process.paused:
                process.resume()
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(self.limits.term_s):
                while process.pid not in self.gone:
                    await trio.sleep(0.02)
                    self._read_status()
                return
            if not self.flag.exists():
                self.contain(
                    IGNORED_SIGTERM, f"still running {self.limits.term_s:g} s after SIGTERM"
                )

    async def _cleanup(self) -> None:
        """After the service is closed: final readings, then remove everything it had."""
        with trio.CancelScope(shield=True):
            with suppress(ServiceError):
                self._read_status()
            self._sample()
            deadline = trio.current_time() + _REAP_PATIENCE_S
            while True:  # a fork bomb's hundreds of processes take a moment to die
                gone = self.cgroup is None or self.cgroup.try_remove()
                gone = (self.uid is None or self.uid.kill_once()) and gone
                if gone or trio.current_time() > deadline:
                    break
                await trio.sleep(0.05)
            if not gone:
                self.report.notes.append(
                    f"processes or a cgroup of it survived {_REAP_PATIENCE_S:g} s of SIGKILL"
                )
            self._remove()

    def _remove(self) -> None:
        if self.uid is not None:
            # what the candidate's uid made in the machine's shared folders (with uid
            # isolation it sees them: e.g. libfaketime's faketime_shm_<pid>, never removed by
            # a killed process); the uid is this run's alone until released
            self.uid.release(clean=remove_owned(self.uid.uid, SHARED_FOLDERS))
        if self.detector is not None:
            self.detector.close()
        for sock, _ in self.tripwires:
            sock.close()
        if self.netns is not None:
            self.netns.close()
        if self.box_mounted:
            _libc.umount2(os.fsencode(self.box.path), _MNT_DETACH)
        shutil.rmtree(self.dir, ignore_errors=True)
