"""Shared by the schedule tests: a realistic fault space, random valid spaces, a range check."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from faults.kinds import INSTANTANEOUS, TARGET_KIND, FaultKind, TargetKind
from faults.model import AfterBytes, AtTime, FaultEvent, FaultSchedule, OnConnection, OnMessage
from faults.params import param_shapes
from faults.ranges import Choices, FloatRange, IntRange
from faults.space import FaultSpace, FaultTemplate
from faults.trigger_ranges import AfterBytesRange, AtTimeRange, OnConnectionRange, OnMessageRange
from faults.triggers import trigger_sort_key

PAYMENTS_SPACE: dict[str, Any] = {
    "horizon_s": 30,
    "min_events": 1,
    "max_events": 5,
    "links": ["producer-nats", "consumer-nats", "consumer-postgres", "consumer-gateway"],
    "services": ["consumer", "postgres"],
    "subjects": ["orders"],
    "templates": [
        {
            "kind": "latency",
            "params": {"latency_ms": [10, 500], "jitter_ms": [0, 50]},
            "duration_s": [0.5, 5],
        },
        {
            "kind": "partition",
            "targets": ["consumer-postgres"],
            "params": {"direction": ["both", "upstream"]},
            "triggers": [{"type": "on_connection", "n": [1, 5]}, {"type": "at_time"}],
            "duration_s": [0.5, 3],
        },
        {
            "kind": "redeliver",
            "params": {"count": [1, 3]},
            "triggers": [{"type": "on_message", "n": [1, 20]}],
            "weight": 3,
        },
        {
            "kind": "duplicate_publish",
            "params": {"count": [1, 2]},
            "triggers": [{"type": "after_bytes", "links": ["producer-nats"], "n_bytes": [1, 4096]}],
        },
        {
            "kind": "crash",
            "targets": ["consumer"],
            "params": {"restart_after_s": [0, 2]},
            "triggers": [{"type": "on_message", "subjects": ["orders"], "n": [1, 20]}],
        },
        {"kind": "clock_skew", "params": {"offset_s": [-5, 5]}, "duration_s": [1, 10]},
        {"kind": "pause", "targets": ["postgres"], "duration_s": [0.2, 2]},
        {
            "kind": "reset_peer",
            "targets": ["consumer-gateway"],
            "params": {"timeout_ms": [0, 100]},
            "duration_s": [0.5, 2],
        },
    ],
}

# (lowest allowed, a sensible top) for every numeric parameter.
PARAM_BOUNDS: dict[str, tuple[float, float]] = {
    "latency_ms": (0, 2000),
    "jitter_ms": (0, 500),
    "rate_kbps": (0, 10_000),
    "timeout_ms": (0, 5000),
    "delay_ms": (0, 5000),
    "count": (1, 5),
    "offset_s": (-3600.0, 3600.0),
    "restart_after_s": (0.0, 10.0),
}
NAMES = st.text(alphabet="abcdefgh-.", min_size=1, max_size=6).filter(lambda s: s[0].isalpha())


@st.composite
def _range(draw: st.DrawFn, name: str, shape: Any) -> Any:
    if isinstance(shape, tuple):
        return draw(st.lists(st.sampled_from(shape), min_size=1, max_size=3, unique=True))
    low, top = PARAM_BOUNDS[name]
    if shape is int:
        lo = draw(st.integers(int(low), int(top)))
        return [lo, draw(st.integers(lo, int(top)))]
    lo_f = draw(st.floats(low, top, allow_nan=False))
    return [lo_f, draw(st.floats(lo_f, top, allow_nan=False))]


@st.composite
def _triggers(draw: st.DrawFn, kind: FaultKind, names: dict[str, list[str]], horizon: float) -> Any:
    own = TARGET_KIND[kind]
    options: list[dict[str, Any]] = [{"type": "at_time"}]
    end = draw(st.floats(0, horizon))
    options.append({"type": "at_time", "offset_s": [draw(st.floats(0, end)), end]})
    sub_links = st.lists(st.sampled_from(names["links"]), min_size=1, unique=True)
    options.append({"type": "on_connection", "links": draw(sub_links), "n": [1, 9]})
    options.append({"type": "after_bytes", "links": draw(sub_links), "n_bytes": [1, 10_000]})
    options.append({"type": "on_message", "subjects": names["subjects"][:1], "n": [2, 7]})
    if own is TargetKind.LINK:
        options.append({"type": "on_connection", "n": [1, 3]})
    if own is TargetKind.SUBJECT:
        options.append({"type": "on_message", "n": [1, 3]})
    return draw(st.lists(st.sampled_from(options), min_size=1, max_size=3))


@st.composite
def space_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """Valid fault spaces of every kind, target and trigger shape."""
    names = {
        key: draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
        for key in ("links", "services", "subjects")
    }
    horizon = draw(st.floats(0.5, 120, allow_nan=False))
    templates = []
    for kind in draw(st.lists(st.sampled_from(list(FaultKind)), min_size=1, max_size=5)):
        declared = names[TARGET_KIND[kind].value + "s"]
        template: dict[str, Any] = {
            "kind": kind.value,
            "weight": draw(st.sampled_from([0.5, 1, 4])),
        }
        if draw(st.booleans()):
            template["targets"] = draw(st.lists(st.sampled_from(declared), min_size=1, unique=True))
        template["params"] = {n: draw(_range(n, s)) for n, s in param_shapes(kind).items()}
        template["triggers"] = draw(_triggers(kind, names, horizon))
        if kind not in INSTANTANEOUS and draw(st.booleans()):
            lo = draw(st.floats(0.001, 30))
            template["duration_s"] = [lo, draw(st.floats(lo, 60))]
        templates.append(template)
    low = draw(st.integers(0, 3))
    return {
        "horizon_s": horizon,
        "min_events": low,
        "max_events": draw(st.integers(low, 8)),
        **names,
        "templates": templates,
    }


def _within(value: Any, spec: Any) -> bool:
    if isinstance(spec, Choices):
        return value in spec.values
    assert isinstance(value, int if isinstance(spec, IntRange) else float)
    return bool(spec.lo <= value <= spec.hi)


def _trigger_fits(space: FaultSpace, template: FaultTemplate, event: FaultEvent) -> bool:
    trigger, own = event.trigger, (event.target.name,)
    for spec in template.triggers:
        if isinstance(spec, AtTimeRange) and isinstance(trigger, AtTime):
            bounds = spec.offset_s or FloatRange(lo=0.0, hi=space.horizon_s)
            ok = _within(trigger.offset_s, bounds)
        elif isinstance(spec, OnMessageRange) and isinstance(trigger, OnMessage):
            ok = trigger.subject in (spec.subjects or own) and _within(trigger.n, spec.n)
        elif isinstance(spec, OnConnectionRange) and isinstance(trigger, OnConnection):
            ok = trigger.link in (spec.links or own) and _within(trigger.n, spec.n)
        elif isinstance(spec, AfterBytesRange) and isinstance(trigger, AfterBytes):
            ok = trigger.link in (spec.links or own) and _within(trigger.n_bytes, spec.n_bytes)
        else:
            ok = False
        if ok:
            return True
    return False


def _params_fit(template: FaultTemplate, event: FaultEvent) -> bool:
    fields = type(event.params).model_fields
    for name, value in event.params.model_dump().items():
        spec = template.params.get(name)
        if not (_within(value, spec) if spec is not None else value == fields[name].default):
            return False
    return True


def fits(space: FaultSpace, event: FaultEvent) -> bool:
    """Whether some template of ``space`` allows ``event`` exactly as drawn."""
    for template in space.templates:
        if template.kind is not event.kind or event.target.name not in space.targets_of(template):
            continue
        if template.duration_s is None:
            duration_ok = event.duration_s is None
        else:
            duration_ok = event.duration_s is not None and _within(
                event.duration_s, template.duration_s
            )
        if duration_ok and _params_fit(template, event) and _trigger_fits(space, template, event):
            return True
    return False


def check_inside(space: FaultSpace, schedule: FaultSchedule) -> None:
    """Assert that ``schedule`` is a well-formed schedule of ``space``."""
    assert space.min_events <= len(schedule.events) <= space.max_events
    assert [e.id for e in schedule.events] == [f"f{i}" for i in range(len(schedule.events))]
    assert schedule.space_hash == space.content_hash()
    keys = [trigger_sort_key(e.trigger) for e in schedule.events]
    assert keys == sorted(keys)
    for event in schedule.events:
        assert fits(space, event), event
        if event.kind in INSTANTANEOUS:
            assert event.duration_s is None
        if isinstance(event.trigger, AtTime):
            assert 0 <= event.trigger.offset_s <= space.horizon_s
