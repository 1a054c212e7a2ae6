"""The NATS frame splitter: whole frames out, however the bytes are cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faults.proxy.nats_protocol import NotNats, split_frames

STREAM = (
    b'INFO {"server_id":"x","jetstream":true}\r\n'
    b"PING\r\n"
    b"MSG orders.new 1 $JS.ACK.ORDERS.c.2.7.7.1700000000.0 5\r\nhello\r\n"
    b"HPUB orders.new _INBOX.a 28 33\r\nNATS/1.0\r\nNats-Msg-Id: 1\r\n\r\nworld\r\n"
    b"PUB $JS.ACK.ORDERS.c.2.7.7.1700000000.0 0\r\n\r\n"
    b"+OK\r\n"
)


def test_splits_every_frame_with_its_payload() -> None:
    frames, rest = split_frames(STREAM)
    assert rest == b""
    assert [f.op for f in frames] == [b"INFO", b"PING", b"MSG", b"HPUB", b"PUB", b"+OK"]
    assert b"".join(f.raw for f in frames) == STREAM
    msg, hpub, ack = frames[2], frames[3], frames[4]
    assert msg.payload == b"hello"
    assert msg.is_js_delivery
    assert msg.delivery_count == 2
    assert hpub.subject == "orders.new"
    assert hpub.reply == "_INBOX.a"
    assert hpub.payload.endswith(b"world")
    assert ack.is_js_ack
    assert not msg.is_js_ack


def test_incomplete_frame_is_kept_as_rest() -> None:
    cut = STREAM.index(b"hello") + 2
    frames, rest = split_frames(STREAM[:cut])
    assert [f.op for f in frames] == [b"INFO", b"PING"]
    assert STREAM[:cut].endswith(rest)
    assert rest.startswith(b"MSG ")


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_cut_of_the_stream_gives_the_same_frames(cuts: list[int]) -> None:
    whole, _ = split_frames(STREAM)
    frames = []
    buffer = b""
    previous = 0
    for cut in [*sorted(cuts), len(STREAM)]:
        buffer += STREAM[previous:cut]
        previous = cut
        got, buffer = split_frames(buffer)
        frames += got
    assert buffer == b""
    assert [f.raw for f in frames] == [f.raw for f in whole]


def test_garbage_is_not_nats() -> None:
    with pytest.raises(NotNats):
        split_frames(b"PUB subject notanumber\r\n")
    with pytest.raises(NotNats):
        split_frames(b"x" * (70 * 1024))


def test_ack_and_delivery_name_the_same_stream_sequence() -> None:
    frames, _ = split_frames(STREAM)
    msg, ack = frames[2], frames[4]
    assert msg.stream_sequence == ack.stream_sequence == 7
