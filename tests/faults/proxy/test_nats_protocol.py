"""The NATS frame splitter: whole frames out, however the bytes are cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faults.proxy.nats_protocol import AckSubject, NotNats, parse_ack_subject, split_frames

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


V1_ACK = "$JS.ACK.ORDERS.charger.2.10.31.1795951777146411440.4"
V2_ACK = "$JS.ACK.HUB.ACCHASH.ORDERS.charger.2.10.31.1795951777146411440.4.r4nd0m"


@pytest.mark.parametrize(
    ("subject", "domain", "account_hash"),
    [
        (V1_ACK, "", ""),
        (V2_ACK, "HUB", "ACCHASH"),
        # No domain is "_"; the clients accept the newer layout without its last token.
        ("$JS.ACK._.ACCHASH.ORDERS.charger.2.10.31.1795951777146411440.4", "", "ACCHASH"),
    ],
    ids=["old-9-tokens", "new-12-tokens", "new-11-tokens-no-domain"],
)
def test_both_ack_layouts_give_the_same_fields(
    subject: str, domain: str, account_hash: str
) -> None:
    assert parse_ack_subject(subject) == AckSubject(
        stream="ORDERS",
        consumer="charger",
        delivered=2,
        stream_sequence=10,
        consumer_sequence=31,
        timestamp_ns=1795951777146411440,
        pending=4,
        domain=domain,
        account_hash=account_hash,
    )


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.ACK.ORDERS.charger.2.10.31.1795951777146411440",  # 8 tokens
        "$JS.ACK.HUB.ORDERS.charger.2.10.31.1795951777146411440.4",  # 10 tokens
        "$JS.ACK.ORDERS.charger.two.10.31.1795951777146411440.4",  # not a number
        "$JS.ACK.ORDERS.charger.-2.10.31.1795951777146411440.4",
        "$JS.ACK..charger.2.10.31.1795951777146411440.4",  # no stream
        "$JS.API.ORDERS.charger.2.10.31.1795951777146411440.4",
        "orders.new",
        "",
    ],
)
def test_what_is_not_an_ack_subject(subject: str) -> None:
    assert parse_ack_subject(subject) is None


@pytest.mark.parametrize("ack", [V1_ACK, V2_ACK], ids=["old", "new"])
def test_frames_read_sequence_and_delivery_count_from_either_layout(ack: str) -> None:
    stream = f"MSG orders.new 1 {ack} 5\r\nhello\r\nPUB {ack} 0\r\n\r\n".encode()
    (delivery, reply), rest = split_frames(stream)
    assert rest == b""
    assert delivery.is_js_delivery
    assert reply.is_js_ack
    assert (delivery.delivery_count, delivery.stream_sequence) == (2, 10)
    assert reply.ack is not None
    assert (reply.ack.stream, reply.stream_sequence) == ("ORDERS", 10)
