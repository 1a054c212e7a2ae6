"""The fault model: kinds, targets, parameters, triggers, events and schedules."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from faults.kinds import INSTANTANEOUS, LAYER, TARGET_KIND, FaultKind, FaultLayer, TargetKind
from faults.model import (
    AtTime,
    FaultEvent,
    FaultSchedule,
    LatencyParams,
    OnMessage,
    PartitionParams,
    PauseParams,
    RedeliverParams,
    Target,
)
from faults.params import PARAMS, ClockSkewParams, param_shapes
from ground.errors import ConfigError


def event(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "f0",
        "kind": "latency",
        "target": {"kind": "link", "name": "consumer-postgres"},
        "params": {"latency_ms": 100},
        "trigger": {"type": "at_time", "offset_s": 1.5},
        "duration_s": 2.0,
    }
    data.update(changes)
    return data


def test_every_kind_has_a_target_kind_a_layer_and_params() -> None:
    assert set(TARGET_KIND) == set(FaultKind) == set(LAYER) == set(PARAMS)
    assert INSTANTANEOUS == {FaultKind.REDELIVER, FaultKind.DUPLICATE_PUBLISH, FaultKind.CRASH}
    assert LAYER[FaultKind.REDELIVER] is FaultLayer.MESSAGE
    assert LAYER[FaultKind.CLOCK_SKEW] is FaultLayer.CLOCK
    assert TARGET_KIND[FaultKind.PAUSE] is TargetKind.SERVICE


def test_every_param_has_a_shape() -> None:
    for kind in FaultKind:
        for shape in param_shapes(kind).values():
            assert shape in (int, float) or isinstance(shape, tuple)
    assert param_shapes(FaultKind.PARTITION) == {"direction": ("both", "upstream", "downstream")}
    assert param_shapes(FaultKind.LATENCY) == {"latency_ms": int, "jitter_ms": int}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LatencyParams(latency_ms=-5), "latency_ms must be >= 0, got -5"),
        (lambda: LatencyParams(latency_ms=5, jitter_ms=-1), "jitter_ms must be >= 0, got -1"),
        (
            lambda: LatencyParams.from_dict({"latency_ms": 1.5}),
            "latency_ms must be an integer, got 1.5",
        ),
        (
            lambda: LatencyParams.from_dict({"latency_ms": True}),
            "latency_ms must be an integer, got True",
        ),
        (lambda: LatencyParams.from_dict({}), "latency_ms is required"),
        (
            lambda: LatencyParams.from_dict({"latency_ms": 1, "stream": "up"}),
            "unknown field stream",
        ),
        (lambda: RedeliverParams(count=0), "count must be >= 1, got 0"),
        (
            lambda: PartitionParams.from_dict({"direction": "sideways"}),
            "direction must be one of 'both', 'upstream' or 'downstream', got 'sideways'",
        ),
        (
            lambda: ClockSkewParams(offset_s=float("nan")),
            "offset_s must be a finite number, got nan",
        ),
    ],
)
def test_bad_params_raise_one_line_config_errors(build: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build()
    assert str(caught.value) == message


def test_params_accept_their_ranges() -> None:
    assert ClockSkewParams(offset_s=-3).offset_s == -3.0
    assert isinstance(ClockSkewParams(offset_s=-3).offset_s, float)
    assert PartitionParams().direction == "both"
    assert RedeliverParams().count == 1


def test_target_short_form_and_str() -> None:
    assert Target.from_dict("link:consumer-postgres") == Target.link("consumer-postgres")  # type: ignore[arg-type]
    assert str(Target.subject("orders.>")) == "subject:orders.>"
    with pytest.raises(ConfigError, match="must look like 'link:NAME', got 'postgres'"):
        Target.from_dict("postgres")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^name must match .*, got 'a b'$"):
        Target.service("a b")


def test_event_reads_typed_params_for_its_kind() -> None:
    made = FaultEvent.from_dict(event())
    assert made.params == LatencyParams(latency_ms=100, jitter_ms=0)
    assert made.trigger == AtTime(offset_s=1.5)
    assert made.layer is FaultLayer.NETWORK
    redeliver = FaultEvent.from_dict(
        event(
            kind="redeliver",
            target="subject:orders",
            params={"count": 3},
            duration_s=None,
            trigger={"type": "on_message", "subject": "orders", "n": 4},
        )
    )
    assert redeliver.params == RedeliverParams(count=3)
    assert redeliver.trigger == OnMessage(subject="orders", n=4)
    paused = FaultEvent.from_dict(event(kind="pause", target="service:pg", params={}))
    assert paused.params == PauseParams()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"params": {"latency_ms": -5}}, "params.latency_ms must be >= 0, got -5"),
        ({"params": {"latency_ms": 1, "count": 2}}, "unknown field params.count"),
        ({"params": [1]}, "params must be a table (dict), got [1]"),
        ({"target": "service:postgres"}, "latency targets a link, got service:postgres"),
        (
            {"kind": "crash", "target": "service:pg", "params": {}, "duration_s": 3},
            "crash is instantaneous: duration_s must be None, got 3.0",
        ),
        ({"duration_s": 0}, "duration_s must be > 0.0, got 0"),
        ({"id": "0"}, "id must match ^[A-Za-z][A-Za-z0-9_-]{0,63}$, got '0'"),
        (
            {"trigger": {"type": "soon"}},
            "trigger.type must be one of 'at_time', 'on_connection', 'after_bytes', "
            "'on_message', got 'soon'",
        ),
        (
            {"trigger": {"type": "on_connection", "link": "a", "n": 0}},
            "trigger.on_connection.n must be >= 1, got 0",
        ),
        (
            {"trigger": {"type": "after_bytes", "link": "a", "n_bytes": 0}},
            "trigger.after_bytes.n_bytes must be >= 1, got 0",
        ),
        (
            {"trigger": {"type": "at_time", "offset_s": -1}},
            "trigger.at_time.offset_s must be >= 0.0, got -1",
        ),
    ],
)
def test_bad_events_raise_one_line_config_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FaultEvent.from_dict(event(**changes))
    assert str(caught.value) == message
    with pytest.raises(ConfigError) as direct:
        FaultEvent(**event(**changes))
    assert str(direct.value) == message


def test_event_rejects_params_of_another_kind() -> None:
    with pytest.raises(ConfigError, match=r"^latency needs LatencyParams, got RedeliverParams$"):
        FaultEvent(**event(params=RedeliverParams(count=1)))


def test_unknown_kind_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^kind must be one of 'partition', .* got 'teleport'"):
        FaultEvent.from_dict(event(kind="teleport"))


def schedule() -> FaultSchedule:
    return FaultSchedule.from_dict(
        {
            "seed": 7,
            "space_hash": "abc",
            "events": [
                event(),
                event(
                    id="f1",
                    kind="clock_skew",
                    target="service:consumer",
                    params={"offset_s": -2.5},
                    duration_s=None,
                ),
                event(
                    id="f2",
                    kind="duplicate_publish",
                    target="subject:orders",
                    params={"count": 2},
                    duration_s=None,
                    trigger={"type": "on_connection", "link": "producer-nats", "n": 3},
                ),
            ],
        }
    )


def test_schedule_round_trips_through_msgpack_and_dict() -> None:
    original = schedule()
    assert FaultSchedule.from_msgpack(original.to_msgpack()) == original
    assert FaultSchedule.from_dict(original.to_dict()) == original
    assert FaultSchedule.from_msgpack(original.to_msgpack()).to_msgpack() == original.to_msgpack()


def test_msgpack_is_canonical() -> None:
    data = msgpack.unpackb(schedule().to_msgpack())
    assert list(data) == ["events", "seed", "space_hash"]
    assert list(data["events"][0]) == sorted(data["events"][0])
    assert isinstance(data["events"][0]["duration_s"], float)
    assert isinstance(data["events"][0]["params"]["latency_ms"], int)
    shuffled = {
        "space_hash": "abc",
        "seed": 7,
        "events": list(reversed(schedule().to_dict()["events"]))[::-1],
    }
    assert FaultSchedule.from_dict(shuffled).to_msgpack() == schedule().to_msgpack()
    one = FaultSchedule(seed=1, space_hash="h", events=(FaultEvent(**event(duration_s=2)),))
    two = FaultSchedule(seed=1, space_hash="h", events=(FaultEvent(**event(duration_s=2.0)),))
    assert one.to_msgpack() == two.to_msgpack()


def test_schedule_rejects_duplicate_ids_and_bad_bytes() -> None:
    with pytest.raises(ConfigError, match=r"^duplicate fault event id 'f0'$"):
        FaultSchedule(seed=1, space_hash="h", events=(FaultEvent(**event()),) * 2)
    with pytest.raises(ConfigError, match=r"^fault schedule is not valid msgpack"):
        FaultSchedule.from_msgpack(b"\xc1")
    with pytest.raises(ConfigError, match=r"^fault schedule is not valid msgpack"):
        FaultSchedule.from_msgpack(schedule().to_msgpack()[:-2])
    with pytest.raises(ConfigError, match=r"^fault schedule must be a map, got list$"):
        FaultSchedule.from_msgpack(msgpack.packb([1]))
    with pytest.raises(ConfigError, match=r"^events\[0\]\.params\.latency_ms must be >= 0"):
        FaultSchedule.from_dict(
            {"seed": 1, "space_hash": "h", "events": [event(params={"latency_ms": -1})]}
        )


def test_models_are_frozen() -> None:
    made = FaultEvent(**event())
    with pytest.raises(Exception, match="frozen"):
        made.duration_s = 5.0


def test_model_validate_also_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^params\.latency_ms must be >= 0, got -5$"):
        FaultEvent.model_validate(event(params={"latency_ms": -5}))


def test_canonical_encoding_rules() -> None:
    from faults._canonical import canonical, packb

    assert packb({"b": 1, "a": (2.0, -0.0)}) == packb({"a": [2.0, 0.0], "b": 1})
    assert list(canonical({"b": 1, "a": 2})) == ["a", "b"]
    with pytest.raises(TypeError, match="string keys"):
        packb({1: "x"})
    with pytest.raises(TypeError, match="finite floats"):
        packb(float("inf"))
    with pytest.raises(TypeError, match="cannot encode set"):
        packb({1, 2})


def test_schedules_pickle_for_worker_processes() -> None:
    import pickle

    original = schedule()
    assert pickle.loads(pickle.dumps(original)) == original
