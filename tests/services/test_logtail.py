"""A service's log tail ends its error messages: never empty, so no message ends at a colon."""

from __future__ import annotations

from chaos.services._logtail import LogTail


def test_the_last_line_is_the_last_line_with_text() -> None:
    tail = LogTail()
    for line in ("starting", "listening on 5432", "", "   "):
        tail.add(line)
    assert tail.last() == "listening on 5432"


def test_a_service_that_printed_nothing_says_so() -> None:
    assert LogTail().last() == "it printed nothing"
    tail = LogTail()
    tail.add("")
    assert tail.last() == "it printed nothing"
