"""The golden worker's pause-tolerant timeout: an answer that arrived while the process was
stopped is not lost to a deadline that passed meanwhile (what a SIGSTOP does)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from scenarios.leases.worker import within


async def _answer_during_a_stop(wait: str) -> bytes:
    """Read from a socket whose data arrives while the event loop is blocked (stopped) past
    the read's deadline, then take two more turns of the loop (as a connect or a parse
    does); ``wait`` is ``within`` or ``wait_for``."""
    left, right = socket.socketpair()

    async def read_and_parse() -> bytes:
        data = await reader.read(5)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return data

    reader, writer = await asyncio.open_connection(sock=left)
    try:
        read = read_and_parse()
        if wait == "within":
            pending = asyncio.ensure_future(within(read, 0.05))
        else:
            pending = asyncio.ensure_future(asyncio.wait_for(read, 0.05))
        await asyncio.sleep(0.01)  # the read is waiting
        threading.Timer(0.05, right.sendall, (b"hello",)).start()
        time.sleep(0.3)  # noqa: ASYNC251  the process stops: the deadline passes, data comes
        return await pending
    finally:
        writer.close()
        await writer.wait_closed()
        right.close()


def test_an_answer_that_arrived_during_a_stop_beats_the_stale_deadline() -> None:
    assert asyncio.run(_answer_during_a_stop("within")) == b"hello"


def test_asyncio_wait_for_loses_that_race() -> None:
    """Why ``within`` exists: the plain timeout fires first after a stop."""
    with pytest.raises(TimeoutError):
        asyncio.run(_answer_during_a_stop("wait_for"))


def test_within_still_times_out_when_nothing_comes() -> None:
    async def never() -> None:
        await asyncio.sleep(10)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(within(never(), 0.05))
    assert time.monotonic() - started < 5
