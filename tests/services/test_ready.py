"""The ready line of a restarted service: which start printed it, not how many lines did."""

from __future__ import annotations

import trio

from chaos.services.ready import ReadyLine


class Service:
    def __init__(self) -> None:
        self.starts = 1


def test_a_start_is_ready_once_it_printed_the_line() -> None:
    ready, service = ReadyLine("listening"), Service()
    assert not ready.ready()
    assert not ready.saw("starting")
    assert ready.saw("server listening on 8080")  # before it is attached: start 1
    ready.attach(service)
    assert ready.ready()


def test_a_restart_waits_for_its_own_line_and_a_start_killed_early_prints_none() -> None:
    ready, service = ReadyLine("listening"), Service()
    ready.attach(service)
    ready.saw("listening")
    service.starts = 2  # killed before it printed: start 2 never says it
    assert not ready.ready()
    service.starts = 3
    assert not ready.ready()  # the line of start 1 does not count for start 3
    ready.saw("listening")
    assert ready.ready()
    assert ready.ready(2)
    assert ready.ready(3)


def test_without_a_ready_line_a_service_is_ready_once_started() -> None:
    ready = ReadyLine(None)
    assert ready.ready()
    assert ready.probe() is None
    assert not ready.saw("anything")


def test_the_probe_answers_for_the_current_start() -> None:
    ready, service = ReadyLine("up"), Service()
    ready.attach(service)
    probe = ready.probe()
    assert probe is not None
    assert trio.run(probe) is False
    ready.saw("up")
    assert trio.run(probe) is True
