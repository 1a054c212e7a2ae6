"""The toxics the proxy implements, by their Toxiproxy type name."""

from __future__ import annotations

from faults.proxy.toxics.bandwidth import BandwidthToxic
from faults.proxy.toxics.base import Toxic
from faults.proxy.toxics.latency import LatencyToxic
from faults.proxy.toxics.limit_data import LimitDataToxic
from faults.proxy.toxics.nats_drop_ack import NatsDropAckToxic
from faults.proxy.toxics.nats_duplicate_publish import NatsDuplicatePublishToxic
from faults.proxy.toxics.nats_observe import NatsObserveToxic
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
        NatsDropAckToxic,
        NatsDuplicatePublishToxic,
        NatsObserveToxic,
    )
}

#: The Toxiproxy v2 types; the rest are this project's protocol-aware extensions.
STANDARD_TYPES = frozenset(
    ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data", "noop")
)

__all__ = [
    "STANDARD_TYPES",
    "TOXIC_TYPES",
    "BandwidthToxic",
    "LatencyToxic",
    "LimitDataToxic",
    "NatsDropAckToxic",
    "NatsDuplicatePublishToxic",
    "NatsObserveToxic",
    "NoopToxic",
    "ResetPeerToxic",
    "SlicerToxic",
    "SlowCloseToxic",
    "TimeoutToxic",
    "Toxic",
]
