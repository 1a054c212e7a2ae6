"""One toxic running on one direction of one connection.

A direction's chain is ``reader > stage > stage > ... > writer``: trio tasks joined by
unbuffered memory channels, so every chunk in flight is either in some stage's ``backlog``
(handed over by a previous chain, not yet received), in its ``pending`` (received, not yet
forwarded), or being sent (a memory-channel send is atomic under cancellation). When the
chain changes, the stages are cancelled and their ``backlog + pending`` re-enter the new
chain at the right place: nothing is lost and order is kept.

Like Toxiproxy's ``ToxicStub``, a stage is handed everything its toxic may use when it is
built (its channels, its random streams, a way to report and a way to end the
connection) and nothing else: it knows no direction, connection or proxy.

A toxic that discards data (``drop``, ``close``) leaves a gap in the stream, and a stream
with a gap must never carry another byte: the peer would read later data as if it
followed what was lost (a response body without its headers, a reply to the wrong
query). So a discard marks the stage with an ``Ending``, and from then on the direction
ends the connection (a reset or a close) rather than forward again, even when the toxic
is removed or loses its toxicity draw on an update (see ``faults.proxy._direction``).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import trio

from faults.proxy._chunk import Chunk


class Emit(Protocol):
    """Report an event to the proxy's observers (the caller adds where it happened)."""

    def __call__(self, event: str, /, **fields: Any) -> None: ...


class Abort(Protocol):
    """Close the whole connection now; with ``reset`` the peers see ECONNRESET."""

    def __call__(self, *, reset: bool = False, reason: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class Ending:
    """How a direction that discarded data ends: with a TCP RST (``reset``) or a close,
    not before trio time ``at``."""

    reset: bool = False
    at: float = -math.inf


class Stage:
    """The context a toxic's ``pipe`` works through.

    ``ending`` is set once the toxic has discarded data on this direction (it survives the
    toxic's restarts): see the module docstring.
    """

    def __init__(
        self,
        name: str,
        state: dict[str, Any],
        backlog: list[Chunk],
        input: trio.MemoryReceiveChannel[Chunk],
        output: trio.MemorySendChannel[Chunk],
        *,
        rng: Callable[[str], random.Random],
        emit: Emit,
        abort: Abort,
        ending: Ending | None = None,
    ) -> None:
        self.name = name
        #: Per-toxic state that survives restarts of the toxic on this direction.
        self.state = state
        self.backlog: deque[Chunk] = deque(backlog)
        self.pending: deque[Chunk] = deque()
        self._input = input
        self._output = output
        self._rng = rng
        self._emit = emit
        self._abort = abort
        self.ending = ending

    async def receive(self) -> Chunk:
        """Take the next chunk (from the backlog first) and append it to ``pending``."""
        if self.backlog:
            chunk = self.backlog.popleft()
        else:
            chunk = await self._input.receive()
        self.pending.append(chunk)
        return chunk

    async def forward(self) -> None:
        """Send the oldest pending chunk downstream."""
        await self._output.send(self.pending[0])
        self.pending.popleft()

    async def emit(self, chunk: Chunk) -> None:
        """Send a chunk that is not (or no longer) in ``pending``: a piece of one, say."""
        await self._output.send(chunk)

    def release(self) -> None:
        """Forget the oldest pending chunk once all of it has been sent on (in pieces)."""
        self.pending.popleft()

    def drop(self, ending: Ending | None = None) -> None:
        """Discard the oldest pending chunk. This direction will then never forward again:
        it ends as ``ending`` says (default: a close as soon as the toxic stops)."""
        self.pending.popleft()
        self.ending = ending or self.ending or Ending()

    def rng(self, stream: str) -> random.Random:
        """This toxic's named random stream on this direction of this connection."""
        return self._rng(stream)

    def record(self, stream: str, value: object) -> None:
        """Report a random draw to the proxy's observer."""
        self._emit("draw", stream=stream, value=value)

    def report(self, event: str, **fields: object) -> None:
        """Report what the toxic did (a frame dropped, say) to the proxy's observer."""
        self._emit(event, **fields)

    async def close(self) -> NoReturn:
        """End the stream here: send EOF downstream (data before it still flows), then
        swallow everything that arrives after."""
        self.ending = self.ending or Ending()
        self.pending.clear()
        self.backlog.clear()
        if not self.state.get("_closed"):
            await self._output.send(Chunk(b"", trio.current_time()))
            self.state["_closed"] = True
        while True:
            await self._input.receive()

    async def abort(self, reason: str) -> NoReturn:
        """Close the whole connection now (both directions, a normal close)."""
        self._abort(reason=reason)
        await trio.sleep_forever()

    async def reset(self) -> NoReturn:
        """Close the whole connection with a TCP RST."""
        self._abort(reset=True)
        await trio.sleep_forever()

    def held(self) -> list[Chunk]:
        """Every chunk this stage still owes downstream, oldest first."""
        return [*self.pending, *self.backlog]
