"""One direction of one proxied connection: reader > toxic stages > writer.

With no toxic on the direction, a worker thread forwards the bytes (``faults.proxy._direct``):
an empty chain costs next to nothing. With toxics, chunks
go ``reader > stage > ... > stage > writer`` over unbuffered memory channels. A change of
the toxic list rebuilds the stages without touching the reader or the writer, and every
chunk the old stages held re-enters the new chain (see ``faults.proxy._stage``)::

    client --read--> [reader] --head--> [latency] --> [slicer] --tail--> [writer] --> server

A direction is handed what it needs when its connection builds it (its sockets, toxics,
random streams, a way to report and a way to end the connection); it hands each stage
the same, narrowed to one toxic.

Once a toxic has discarded data, its stage carries an ``Ending`` (``faults.proxy._stage``)
and the direction keeps it by toxic name. When that toxic stops running (removed, or
drawn inactive on an update) the direction never resumes forwarding: it writes what is
older than the gap and ends the connection as the ending says (reset_peer: a reset when
its wait is over; anything else: a close at once).
"""

from __future__ import annotations

import functools
import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import trio

from faults.proxy._chunk import CHUNK_SIZE, Chunk
from faults.proxy._direct import DirectPump
from faults.proxy._stage import Abort, Emit, Ending, Stage
from faults.proxy.toxics.base import Toxic

if TYPE_CHECKING:
    from faults.proxy._spec import ToxicSpec

Stream = Literal["upstream", "downstream"]

#: ``(toxic, stream) -> random.Random``: the named random streams of one direction.
Streams = Callable[[str, str], random.Random]

_PASSTHROUGH = Toxic()


async def send_all(sock: trio.socket.SocketType, data: bytes) -> None:
    """Write all of ``data`` to a trio socket."""
    sent = await sock.send(data)
    if sent < len(data):
        view = memoryview(data)
        while sent < len(data):
            sent += await sock.send(view[sent:])


class Direction:
    """Moves bytes from ``src`` to ``dst`` through the toxics of one stream.

    ``emit`` reports an event (the direction adds the toxic, connection index and stream),
    ``streams`` derives a toxic's named random stream, ``abort`` ends the connection.
    """

    def __init__(
        self,
        stream: Stream,
        src: trio.SocketStream,
        dst: trio.SocketStream,
        specs: Sequence[ToxicSpec],
        *,
        index: int,
        emit: Emit,
        streams: Streams,
        abort: Abort,
        busy_poll_s: float = 0.0,
    ) -> None:
        self.stream = stream
        self._index = index
        self._emit = emit
        self._streams = streams
        self._abort = abort
        self._src = src
        self._dst = dst
        self._specs: list[ToxicSpec] = list(specs)
        self._changed = trio.Event()
        # With toxics from the start, no chunk may go direct before the chain is up.
        self._direct = not self._specs
        self._direct_ready = trio.Event()
        self._direct_ready.set()
        self._head_send, self._head_recv = trio.open_memory_channel[Chunk](0)
        self._tail_send, self._tail_recv = trio.open_memory_channel[Chunk](0)
        self._writer_backlog: deque[Chunk] = deque()
        self._reader_scope: trio.CancelScope | None = None
        self._writer_scope: trio.CancelScope | None = None
        self._rngs: dict[tuple[str, str], random.Random] = {}
        self._states: dict[str, dict[str, Any]] = {}
        self._active: dict[str, tuple[int, bool]] = {}
        self._backlogs: dict[int, list[Chunk]] = {}
        #: Toxics that discarded data on this direction, and how it must end (see above).
        self._endings: dict[str, Ending] = {}
        self._eof_reason: str | None = None
        self._bytes = 0
        self._pump = DirectPump(src.socket.fileno(), dst.socket.fileno(), busy_poll_s)
        self._pump.active = self._direct

    @property
    def bytes_read(self) -> int:
        """Bytes read from the source so far."""
        return self._bytes + self._pump.bytes

    def stop(self) -> None:
        """The connection is closing: stop the direct-path thread at once."""
        self._pump.stop()

    # -- the toxic list -------------------------------------------------------------

    def set_specs(self, specs: Sequence[ToxicSpec]) -> None:
        """Replace the toxic list; the chain is rebuilt at once, nothing held is lost."""
        self._specs = list(specs)
        if self._specs:
            # At once, so no chunk read from now on bypasses the new toxic.
            self._go_chained()
        self._changed.set()

    def is_applied(self, toxic: str) -> bool:
        """Whether the toxic named ``toxic`` won its toxicity draw on this direction."""
        return self._active.get(toxic, (0, False))[1]

    def rng(self, toxic: str, stream: str) -> random.Random:
        """The random stream ``stream`` of ``toxic`` on this direction (one per toxic
        start: a removed toxic's streams are forgotten)."""
        key = (toxic, stream)
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = self._streams(toxic, stream)
        return rng

    def report(self, toxic: str, event: str, /, **fields: Any) -> None:
        """Report what ``toxic`` did (or drew) on this direction of this connection."""
        self._emit(event, toxic=toxic, conn=self._index, direction=self.stream, **fields)

    # -- tasks ----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read)
                nursery.start_soon(self._write)
                nursery.start_soon(self._manage)
                nursery.start_soon(self._stop_pump_on_exit)
        finally:
            self._pump.close()

    async def _stop_pump_on_exit(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self._pump.stop()

    async def _read(self) -> None:
        src = self._src.socket
        while True:
            if self._direct:
                if not self._direct_ready.is_set():
                    await self._direct_ready.wait()
                    continue
                outcome = await self._pump.run()
                if outcome.kind == "error" and outcome.error is not None:
                    raise outcome.error
                if outcome.kind == "woken":
                    await trio.lowlevel.checkpoint()  # a cancellation lands here
                    continue
                data: bytes = outcome.data  # EOF (b"") or read after a toxic arrived
            else:
                data = bytes(await src.recv(CHUNK_SIZE))
                self._bytes += len(data)
            if not await self._deliver(data, trio.current_time()):
                return

    async def _deliver(self, data: bytes, stamp: float) -> bool:
        """Pass ``data`` on (empty means EOF); False once the stream has ended."""
        while True:
            if self._direct:
                if not self._direct_ready.is_set():
                    await self._direct_ready.wait()
                    continue
                if not data:
                    self._abort()
                    return False
                await send_all(self._dst.socket, data)
                return True
            piece = data[:CHUNK_SIZE]
            with trio.CancelScope() as scope:
                self._reader_scope = scope
                await self._head_send.send(Chunk(piece, stamp))
            self._reader_scope = None
            if scope.cancelled_caught:
                continue  # the chain went away while we waited: look again
            if not piece:
                return False
            data = data[CHUNK_SIZE:]
            if not data:
                return True

    async def _write(self) -> None:
        dst = self._dst.socket
        while True:
            if self._writer_backlog:
                chunk = self._writer_backlog.popleft()
            else:
                if self._direct and not self._direct_ready.is_set():
                    self._direct_ready.set()
                with trio.CancelScope() as scope:
                    self._writer_scope = scope
                    chunk = await self._tail_recv.receive()
                self._writer_scope = None
                if scope.cancelled_caught:
                    continue
            if chunk.eof:
                self._abort(reason=self._eof_reason)
                return
            await send_all(dst, chunk.data)

    async def _manage(self) -> None:
        running: list[Stage] = []
        while True:
            specs = self._specs
            toxics = [spec.toxic if self._is_active(spec) else _PASSTHROUGH for spec in specs]
            ending = self._ending_due(running, specs, toxics)
            if ending is not None:
                await self._end(running, ending)
            self._place_held(running, specs)
            running = []
            if not specs:
                self._go_direct()
                await self._wait_changed()
                continue
            self._go_chained()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    running = self._start_stages(nursery, specs, toxics)
                    await self._wait_changed()
                    scope.cancel()

    async def _wait_changed(self) -> None:
        await self._changed.wait()
        self._changed = trio.Event()

    # -- switching modes --------------------------------------------------------------

    def _go_direct(self) -> None:
        if self._direct:
            return
        self._direct = True
        self._pump.active = True
        self._direct_ready = trio.Event()
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        self._wake_writer()

    def _go_chained(self) -> None:
        if not self._direct:
            return
        self._direct = False
        self._pump.active = False
        self._pump.wake()
        self._direct_ready.set()  # wakes a reader waiting to go direct: it re-checks

    def _wake_writer(self) -> None:
        if self._writer_scope is not None:
            self._writer_scope.cancel()

    # -- the chain ------------------------------------------------------------------

    def _place_held(self, old: list[Stage], specs: Sequence[ToxicSpec]) -> None:
        """Hand every chunk the old stages held to the stage it must re-enter."""
        names = [s.name for s in specs]
        old_names = {s.name for s in old}
        for name in list(self._states):
            if name not in names:
                self._forget(name)
        self._backlogs = {}
        to_writer: list[Chunk] = []
        first_new = next((i for i, s in enumerate(specs) if s.name not in old_names), None)
        # Stages further down the chain hold older data: walk them back to front.
        for pos in range(len(old) - 1, -1, -1):
            held = old[pos].held()
            if not held:
                continue
            target = next((names.index(s.name) for s in old[pos:] if s.name in names), first_new)
            if target is None:
                to_writer.extend(held)
            else:
                self._backlogs.setdefault(target, []).extend(held)
        if to_writer:
            self._writer_backlog.extend(to_writer)
            self._wake_writer()

    # -- ending after a discard -------------------------------------------------------

    def _ending_due(
        self, old: list[Stage], specs: Sequence[ToxicSpec], toxics: Sequence[Toxic]
    ) -> Ending | None:
        """The ending owed by a toxic that discarded data and will not run in the new
        chain (removed, or drawn inactive): forwarding again would leave a gap."""
        for stage in old:
            if stage.ending is not None:
                self._endings[stage.name] = stage.ending
        running = {s.name for s, t in zip(specs, toxics, strict=True) if t is not _PASSTHROUGH}
        due = [e for name, e in self._endings.items() if name not in running]
        if not due:
            return None
        resets = [e for e in due if e.reset]
        return min(resets, key=lambda e: e.at) if resets else due[0]

    async def _end(self, old: list[Stage], ending: Ending) -> NoReturn:
        """Never forward again: write the held chunks older than every gap (those past the
        last stage that discarded data), then end the connection as ``ending`` says."""
        last = max((pos for pos, stage in enumerate(old) if stage.ending is not None), default=-1)
        older = [chunk for stage in reversed(old[last + 1 :]) for chunk in stage.held()]
        older = [chunk for chunk in older if not chunk.eof]
        self._writer_backlog.extend(older)
        if ending.reset:
            self._wake_writer()
            await trio.sleep_until(ending.at)
            self._abort(reset=True)
        else:
            await trio.sleep_until(ending.at)
            # A close goes after the older data, as an EOF would.
            self._eof_reason = "dropped data"
            self._writer_backlog.append(Chunk(b"", trio.current_time()))
            self._wake_writer()
        await trio.sleep_forever()

    def _forget(self, name: str) -> None:
        self._states.pop(name, None)
        self._active.pop(name, None)
        for key in [k for k in self._rngs if k[0] == name]:
            del self._rngs[key]

    def _start_stages(
        self, nursery: trio.Nursery, specs: Sequence[ToxicSpec], toxics: Sequence[Toxic]
    ) -> list[Stage]:
        stages: list[Stage] = []
        receive = self._head_recv
        for i, spec in enumerate(specs):
            if i == len(specs) - 1:
                send = self._tail_send
                next_receive = None
            else:
                send, next_receive = trio.open_memory_channel[Chunk](0)
            toxic = toxics[i]
            stage = Stage(
                spec.name,
                self._states.setdefault(spec.name, {}),
                self._backlogs.get(i, []),
                receive,
                send,
                rng=functools.partial(self.rng, spec.name),
                emit=functools.partial(self.report, spec.name),
                abort=self._abort,
                ending=self._endings.get(spec.name),
            )
            stages.append(stage)
            nursery.start_soon(toxic.pipe, stage)
            if next_receive is not None:
                receive = next_receive
        return stages

    def _is_active(self, spec: ToxicSpec) -> bool:
        """Draw toxicity once per start (add or update) of a toxic on this direction."""
        known = self._active.get(spec.name)
        if known is not None and known[0] == spec.uid:
            return known[1]
        draw = self.rng(spec.name, "toxicity").random()
        active = draw < spec.toxicity
        self._active[spec.name] = (spec.uid, active)
        self.report(
            spec.name, "draw", stream="toxicity", value=draw, toxicity=spec.toxicity, applied=active
        )
        return active
