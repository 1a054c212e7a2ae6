"""Fault kinds, what each one targets, which are instantaneous and which layer applies them.

This module is the fault taxonomy, written once: the schedule validates targets with
``TARGET_KIND``, the nemesis resolves targets with it and picks an applier by ``LAYER``,
and ``INSTANTANEOUS`` says which kinds take no duration. A new kind is a line in each table
(and its parameters in ``faults/params.py``).
"""

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
    """Where a fault lands; the nemesis has one applier per layer (``chaos/nemesis/``)."""

    NETWORK = "network"  #: a toxic on a proxied link
    MESSAGE = "message"  #: a NATS-aware toxic on a subject's link
    PROCESS = "process"  #: a signal to a service process
    CLOCK = "clock"  #: the service's libfaketime offset


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
    _K.PARTITION: _L.NETWORK,
    _K.LATENCY: _L.NETWORK,
    _K.BANDWIDTH: _L.NETWORK,
    _K.RESET_PEER: _L.NETWORK,
    _K.SLOW_CLOSE: _L.NETWORK,
    _K.REDELIVER: _L.MESSAGE,
    _K.DUPLICATE_PUBLISH: _L.MESSAGE,
    _K.CLOCK_SKEW: _L.CLOCK,
    _K.CRASH: _L.PROCESS,
    _K.PAUSE: _L.PROCESS,
}

INSTANTANEOUS: frozenset[FaultKind] = frozenset({_K.REDELIVER, _K.DUPLICATE_PUBLISH, _K.CRASH})
"""Kinds that happen once and need no heal: their ``duration_s`` must be None."""
