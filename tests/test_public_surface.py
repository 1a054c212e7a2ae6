"""The public surface of each package is what we meant to publish."""

from __future__ import annotations

import chaos.services
import faults.proxy
import faults.proxy.toxics


def test_proxy_surface() -> None:
    assert sorted(faults.proxy.__all__) == [
        "Observer",
        "Proxy",
        "ProxyServer",
        "TOXIC_TYPES",
        "Toxic",
        "ToxicSpec",
        "open_proxy_server",
    ]
    assert set(faults.proxy.toxics.STANDARD_TYPES) == {
        "latency",
        "bandwidth",
        "slow_close",
        "timeout",
        "reset_peer",
        "slicer",
        "limit_data",
        "noop",
    }
    assert set(faults.proxy.TOXIC_TYPES) == faults.proxy.toxics.STANDARD_TYPES | {
        "nats_drop_ack",
        "nats_duplicate_publish",
        "nats_observe",
    }


def test_services_surface() -> None:
    assert {"open_postgres", "open_nats", "open_process_service", "open_run_dir"} <= set(
        chaos.services.__all__
    )

