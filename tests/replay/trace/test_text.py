"""replay.trace.text: the one way trace values and times read as text."""

from __future__ import annotations

from replay.trace.text import atom, clip, fields, seconds


def test_seconds() -> None:
    assert seconds(1_234_000_000) == "+1.234s"
    assert seconds(0) == "+0.000s"
    assert seconds(-500_000_000) == "-0.500s"  # before the run clock's zero: one sign only
    assert seconds(2.5e9) == "+2.500s"
    for unknown in (None, True, "1", [1]):
        assert seconds(unknown) == "?"


def test_atoms_fields_and_clipping() -> None:
    assert atom("o-1") == "o-1"
    assert atom("two words") == '"two words"'
    assert atom({"id": "o-1", "n": 2}) == "{id=o-1, n=2}"
    assert atom(b"\x01\x02") == "0x0102"
    assert atom(bytes(40)) == "<40 bytes>"
    assert fields({"id": "o-1", "n": None}) == "id=o-1 n=null"
    assert fields(None) == ""
    assert clip("x" * 20, 10) == "xxxxxxx..."
    assert len(fields({"k": "v" * 500})) == 160
