"""Fault spaces: loading from plain data, normalisation, content hash, and bad spaces."""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from faults.kinds import FaultKind
from faults.ranges import Choices, FloatRange, IntRange
from faults.space import FaultSpace
from faults.trigger_ranges import AtTimeRange, OnConnectionRange
from ground.errors import ConfigError
from tests.faults.space_samples import PAYMENTS_SPACE

TOML_SPACE = """
horizon_s = 20
max_events = 3
links = ["consumer-postgres"]
services = ["consumer"]

[[templates]]
kind = "latency"
params = { latency_ms = [10, 200] }
duration_s = [1, 4]

[[templates]]
kind = "crash"
params = { restart_after_s = 0.5 }
triggers = [{ type = "on_connection", links = ["consumer-postgres"], n = [2, 4] }]
"""


def test_loads_from_toml_and_normalises() -> None:
    space = FaultSpace.from_dict(tomllib.loads(TOML_SPACE))
    latency, crash = space.templates
    assert latency.params == {"latency_ms": IntRange(lo=10, hi=200)}
    assert latency.triggers == (AtTimeRange(),)
    assert latency.duration_s == FloatRange(lo=1.0, hi=4.0)
    assert crash.params == {"restart_after_s": FloatRange(lo=0.5, hi=0.5)}
    assert crash.triggers == (
        OnConnectionRange(links=("consumer-postgres",), n=IntRange(lo=2, hi=4)),
    )
    assert space.targets_of(crash) == ("consumer",)
    assert space.min_events == 0


def test_choices_accept_one_value_or_a_list() -> None:
    space = FaultSpace.from_dict(PAYMENTS_SPACE)
    assert space.templates[1].params == {"direction": Choices(values=("both", "upstream"))}
    single = copy.deepcopy(PAYMENTS_SPACE)
    single["templates"][1]["params"] = {"direction": "downstream"}
    assert FaultSpace.from_dict(single).templates[1].params == {
        "direction": Choices(values=("downstream",))
    }


def test_content_hash_is_stable_and_sees_the_effective_space() -> None:
    space = FaultSpace.from_dict(PAYMENTS_SPACE)
    assert (
        space.content_hash() == FaultSpace.from_dict(copy.deepcopy(PAYMENTS_SPACE)).content_hash()
    )
    assert FaultSpace.from_dict(space.to_dict()) == space
    assert FaultSpace.from_dict(space.to_dict()).content_hash() == space.content_hash()
    spelled_out = copy.deepcopy(PAYMENTS_SPACE)
    spelled_out["templates"][0]["weight"] = 1.0
    spelled_out["templates"][0]["triggers"] = [{"type": "at_time", "offset_s": None}]
    assert FaultSpace.from_dict(spelled_out).content_hash() == space.content_hash()
    changed = copy.deepcopy(PAYMENTS_SPACE)
    changed["templates"][0]["params"]["latency_ms"] = [10, 501]
    assert FaultSpace.from_dict(changed).content_hash() != space.content_hash()
    assert len(space.content_hash()) == 64


def bad(**edits: Any) -> dict[str, Any]:
    data = copy.deepcopy(PAYMENTS_SPACE)
    for path, value in edits.items():
        *parents, last = path.split("__")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bad(templates=[]), "fault space has no templates"),
        (bad(min_events=4, max_events=2), "min_events (4) > max_events (2)"),
        (bad(max_events=5000), "max_events must be <= 1000, got 5000"),
        (bad(horizon_s=0), "horizon_s must be > 0.0, got 0"),
        (
            bad(templates__0__kind="teleport"),
            "templates[0].kind must be one of 'partition', 'latency', 'bandwidth', 'reset_peer',"
            " 'slow_close', 'redeliver', 'duplicate_publish', 'clock_skew', 'crash' or 'pause',"
            " got 'teleport'",
        ),
        (
            bad(templates__0__targets=["postgres"]),
            "templates[0] (latency): target 'postgres' is not a declared link (declared: "
            "producer-nats, consumer-nats, consumer-postgres, consumer-gateway)",
        ),
        (
            bad(services=[]),
            "templates[4] (crash): target 'consumer' is not a declared service (declared: none)",
        ),
        (
            bad(subjects=[]),
            "templates[2] (redeliver): no targets: the space declares no subjects",
        ),
        (
            bad(templates__0__params={"latency_ms": [-5, 3]}),
            "templates[0].params.latency_ms must be >= 0, got -5",
        ),
        (
            bad(templates__0__params={"latency_ms": [5, 3]}),
            "templates[0].params.latency_ms: min 5 > max 3",
        ),
        (
            bad(templates__0__params={"latency_ms": [1, 2, 3]}),
            "templates[0].params.latency_ms must be [min, max], got [1, 2, 3]",
        ),
        (
            bad(templates__0__params={"latency_ms": [1.5, 2]}),
            "templates[0].params.latency_ms.lo must be an integer, got 1.5",
        ),
        (
            bad(templates__0__params={"jitter_ms": 5}),
            "templates[0].params.latency_ms is required",
        ),
        (
            bad(templates__0__params={"latncy_ms": 5}),
            "templates[0].params: latency has no parameter 'latncy_ms' (it has: latency_ms, "
            "jitter_ms)",
        ),
        (
            bad(templates__1__params={"direction": ["sideways"]}),
            "templates[1].params: direction must be one of both, upstream, downstream, "
            "got 'sideways'",
        ),
        (
            bad(templates__2__duration_s=[1, 2]),
            "templates[2]: redeliver is instantaneous: duration_s does not apply",
        ),
        (
            bad(templates__0__duration_s=[0, 2]),
            "templates[0]: duration_s must be > 0, got min 0.0",
        ),
        (bad(templates__0__weight=0), "templates[0].weight must be > 0.0, got 0"),
        (
            bad(templates__2__triggers=[{"type": "on_connection", "n": 1}]),
            "templates[2] (redeliver): on_connection trigger needs links: the fault does not "
            "target a link",
        ),
        (
            bad(templates__6__triggers=[{"type": "on_message", "n": 1}]),
            "templates[6] (pause): on_message trigger needs subjects: the fault does not "
            "target a subject",
        ),
        (
            bad(templates__3__triggers=[{"type": "after_bytes", "links": ["x"], "n_bytes": 1}]),
            "templates[3] (duplicate_publish): after_bytes trigger link 'x' is not a declared "
            "link (declared: producer-nats, consumer-nats, consumer-postgres, consumer-gateway)",
        ),
        (
            bad(templates__0__triggers=[{"type": "at_time", "offset_s": [1, 40]}]),
            "templates[0] (latency): at_time offset_s max 40.0 is past horizon_s 30.0",
        ),
        (
            bad(templates__0__triggers=[{"type": "on_connection", "n": [0, 3]}]),
            "templates[0].triggers[0].on_connection.n must be >= 1, got 0 (and 1 more)",
        ),
        (
            bad(templates__0__triggers=[]),
            "templates[0].triggers must have at least 1 item(s)",
        ),
        (
            bad(links=["bad name"]),
            "links[0] must match ^[A-Za-z0-9_][A-Za-z0-9_.*>:/-]*$, got 'bad name'",
        ),
        (bad(extra=1), "unknown field extra"),
    ],
)
def test_bad_spaces_raise_one_line_config_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FaultSpace.from_dict(data)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


def test_catalogue_documents_every_kind_and_its_example_space_loads() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "faults.md").read_text()
    for kind in FaultKind:
        assert f"### {kind.value}\n" in doc
    example = re.search(r"```toml\n(.*?)```", doc, re.S)
    assert example is not None
    space = FaultSpace.from_dict(tomllib.loads(example.group(1)))
    assert [t.kind.value for t in space.templates] == ["latency", "partition", "redeliver"]
