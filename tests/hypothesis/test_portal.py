"""The portal: one trio loop in a thread, called from synchronous code (no services)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.lowlevel

from ground._portal import Portal, PortalClosed


def test_a_call_runs_on_the_loop_thread_and_returns_its_result() -> None:
    async def where(x: int) -> tuple[int, str]:
        await trio.lowlevel.checkpoint()
        return x * 2, threading.current_thread().name

    with Portal("test-portal") as portal:
        assert portal.run(where, 21) == (42, "test-portal")
        assert portal.run_sync(lambda: threading.current_thread().name) == "test-portal"


def test_state_lives_between_calls_on_one_loop() -> None:
    with Portal() as portal:
        event = portal.run_sync(trio.Event)  # made on the loop, used by later calls
        tokens = {portal.run_sync(trio.lowlevel.current_trio_token) for _ in range(3)}
        assert len(tokens) == 1
        portal.run_sync(event.set)
        portal.run(event.wait)  # would hang on another loop


def test_an_exception_is_raised_in_the_callers_thread() -> None:
    async def fail() -> None:
        raise ValueError("from the loop")

    with Portal() as portal:
        with pytest.raises(ValueError, match="from the loop"):
            portal.run(fail)
        assert portal.run_sync(lambda: 3) == 3  # the loop goes on


def test_a_held_context_stays_open_until_exit_and_raises_its_exit_error() -> None:
    log: list[str] = []

    @asynccontextmanager
    async def resource(fail_on_exit: bool) -> AsyncIterator[str]:
        log.append("enter")
        try:
            yield "value"
        finally:
            await trio.lowlevel.checkpoint()
            log.append("exit")
            if fail_on_exit:
                raise RuntimeError("exit failed")

    with Portal() as portal:
        held = portal.enter(resource(False))
        assert held.value == "value"
        assert log == ["enter"]
        held.exit()
        assert log == ["enter", "exit"]
        failing = portal.enter(resource(True))
        with pytest.raises(RuntimeError, match="exit failed"):
            failing.exit()


def test_an_error_entering_is_raised_by_enter() -> None:
    @asynccontextmanager
    async def broken() -> AsyncIterator[None]:
        raise OSError("cannot start")
        yield  # pragma: no cover

    with Portal() as portal:
        with pytest.raises(OSError, match="cannot start"):
            portal.enter(broken())


def test_close_cancels_what_is_still_held_and_calls_then_fail() -> None:
    cancelled = []

    @asynccontextmanager
    async def forever() -> AsyncIterator[None]:
        try:
            yield
        except BaseException as exc:
            cancelled.append(type(exc).__name__)
            raise

    portal = Portal().start()
    portal.enter(forever())
    portal.close()
    assert cancelled == ["Cancelled"]
    assert not portal.running
    with pytest.raises(PortalClosed):
        portal.run_sync(lambda: None)
