"""Fault kinds, what each one targets, which are instantaneous and which layer applies them."""

from __future__ import annotations

from enum import StrEnum


class FaultKind(StrEnum):
    """What goes wrong."""

    PARTITION = "partition"
    LATENCY = "latency"
    BANDWIDTH = "bandwidth"
    RESET_PEER = "reset_peer"
    SLOW_CLOSE = "slow_close"
    REDELIVER = "redeliver"
    DUPLICATE_PUBLISH = "duplicate_publish"
    CLOCK_SKEW = "clock_skew"
    CRASH = "crash"
    PAUSE = "pause"


class TargetKind(StrEnum):
    """What a fault is aimed at."""

    LINK = "link"
    SERVICE = "service"
    SUBJECT = "subject"


class FaultLayer(StrEnum):
    """The part of the harness that applies a fault kind."""

    PROXY_TOXIC = "proxy_toxic"
    MESSAGE_PROXY = "message_proxy"
    PROCESS = "process"
    FAKETIME = "faketime"


_K, _T, _L = FaultKind, TargetKind, FaultLayer

TARGET_KIND: dict[FaultKind, TargetKind] = {
    _K.PARTITION: _T.LINK,
    _K.LATENCY: _T.LINK,
    _K.BANDWIDTH: _T.LINK,
    _K.RESET_PEER: _T.LINK,
    _K.SLOW_CLOSE: _T.LINK,
    _K.REDELIVER: _T.SUBJECT,
    _K.DUPLICATE_PUBLISH: _T.SUBJECT,
    _K.CLOCK_SKEW: _T.SERVICE,
    _K.CRASH: _T.SERVICE,
    _K.PAUSE: _T.SERVICE,
}

LAYER: dict[FaultKind, FaultLayer] = {
    _K.PARTITION: _L.PROXY_TOXIC,
    _K.LATENCY: _L.PROXY_TOXIC,
    _K.BANDWIDTH: _L.PROXY_TOXIC,
    _K.RESET_PEER: _L.PROXY_TOXIC,
    _K.SLOW_CLOSE: _L.PROXY_TOXIC,
    _K.REDELIVER: _L.MESSAGE_PROXY,
    _K.DUPLICATE_PUBLISH: _L.MESSAGE_PROXY,
    _K.CLOCK_SKEW: _L.FAKETIME,
    _K.CRASH: _L.PROCESS,
    _K.PAUSE: _L.PROCESS,
}

INSTANTANEOUS: frozenset[FaultKind] = frozenset({_K.REDELIVER, _K.DUPLICATE_PUBLISH, _K.CRASH})
"""Kinds that happen once and need no heal: their ``duration_s`` must be None."""
