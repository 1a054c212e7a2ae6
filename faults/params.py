"""Typed, range-checked parameters for each fault kind."""

from __future__ import annotations

from typing import Annotated, Literal, get_args, get_origin

from pydantic import Field

from faults._validation import FrozenModel
from faults.kinds import FaultKind

Millis = Annotated[int, Field(strict=True, ge=0)]
Count = Annotated[int, Field(strict=True, ge=1)]
YEAR_S = 365 * 24 * 3600


class PartitionParams(FrozenModel):
    """Drop traffic on a link: both ways, or only client->server / server->client."""

    direction: Literal["both", "upstream", "downstream"] = "both"


class LatencyParams(FrozenModel):
    """Delay every chunk by ``latency_ms`` +/- ``jitter_ms``."""

    latency_ms: Millis
    jitter_ms: Millis = 0


class BandwidthParams(FrozenModel):
    """Limit throughput to ``rate_kbps`` kilobytes per second (Toxiproxy's ``rate``)."""

    rate_kbps: Annotated[int, Field(strict=True, ge=0)]


class ResetParams(FrozenModel):
    """Reset connections (TCP RST) ``timeout_ms`` after data arrives, 0 for at once."""

    timeout_ms: Millis = 0


class SlowCloseParams(FrozenModel):
    """Delay the close of a connection by ``delay_ms``."""

    delay_ms: Millis


class RedeliverParams(FrozenModel):
    """Drop a processed message's ack ``count`` times so the broker redelivers it."""

    count: Count = 1


class DuplicatePublishParams(FrozenModel):
    """Publish a message ``count`` extra times, as a producer retrying a lost confirmation."""

    count: Count = 1


class ClockSkewParams(FrozenModel):
    """Shift a service's clock by ``offset_s`` seconds (negative: the past)."""

    offset_s: Annotated[float, Field(strict=True, ge=-YEAR_S, le=YEAR_S)]


class CrashParams(FrozenModel):
    """SIGKILL the service, restart it ``restart_after_s`` later."""

    restart_after_s: Annotated[float, Field(strict=True, ge=0)] = 0.0


class PauseParams(FrozenModel):
    """SIGSTOP the service; SIGCONT when the fault heals (no parameters)."""


FaultParams = (
    PartitionParams
    | LatencyParams
    | BandwidthParams
    | ResetParams
    | SlowCloseParams
    | RedeliverParams
    | DuplicatePublishParams
    | ClockSkewParams
    | CrashParams
    | PauseParams
)

PARAMS: dict[FaultKind, type[FaultParams]] = {
    FaultKind.PARTITION: PartitionParams,
    FaultKind.LATENCY: LatencyParams,
    FaultKind.BANDWIDTH: BandwidthParams,
    FaultKind.RESET_PEER: ResetParams,
    FaultKind.SLOW_CLOSE: SlowCloseParams,
    FaultKind.REDELIVER: RedeliverParams,
    FaultKind.DUPLICATE_PUBLISH: DuplicatePublishParams,
    FaultKind.CLOCK_SKEW: ClockSkewParams,
    FaultKind.CRASH: CrashParams,
    FaultKind.PAUSE: PauseParams,
}


ParamShapes = dict[str, type[int] | type[float] | tuple[str, ...]]


def param_shapes(kind: FaultKind) -> ParamShapes:
    """Each parameter of ``kind`` by name: ``int``, ``float`` or its allowed choices."""
    shapes: ParamShapes = {}
    for name, field in PARAMS[kind].model_fields.items():
        annotation = field.annotation
        if get_origin(annotation) is Literal:
            shapes[name] = tuple(str(choice) for choice in get_args(annotation))
        elif annotation is int:
            shapes[name] = int
        elif annotation is float:
            shapes[name] = float
        else:  # pragma: no cover - guarded by test_every_param_has_a_shape
            raise TypeError(f"{kind} parameter {name} has no drawable shape")
    return shapes
