"""The toxics the proxy implements, by their Toxiproxy type name."""

from __future__ import annotations

from faults.proxy.toxics.bandwidth import BandwidthToxic
from faults.proxy.toxics.base import Toxic
from faults.proxy.toxics.latency import LatencyToxic
from faults.proxy.toxics.limit_data import LimitDataToxic
from faults.proxy.toxics.noop import NoopToxic
from faults.proxy.toxics.reset_peer import ResetPeerToxic
from faults.proxy.toxics.slicer import SlicerToxic
from faults.proxy.toxics.slow_close import SlowCloseToxic
from faults.proxy.toxics.timeout import TimeoutToxic

TOXIC_TYPES: dict[str, type[Toxic]] = {
    cls.type_name: cls
    for cls in (
        LatencyToxic,
        BandwidthToxic,
        SlowCloseToxic,
        TimeoutToxic,
        ResetPeerToxic,
        SlicerToxic,
        LimitDataToxic,
        NoopToxic,
    )
}

__all__ = [
    "TOXIC_TYPES",
    "BandwidthToxic",
    "LatencyToxic",
    "LimitDataToxic",
    "NoopToxic",
    "ResetPeerToxic",
    "SlicerToxic",
    "SlowCloseToxic",
    "TimeoutToxic",
    "Toxic",
]
