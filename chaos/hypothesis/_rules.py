"""The rules a ``ChaosMachine`` gets from its fault space: one per fault template.

Each rule injects its template's fault now (whatever trigger the template gives), on one of
its targets, with parameters and a duration from its ranges. Arguments are Hypothesis's own
strategies (``st.integers``, ``st.sampled_from``): one choice each, so that Hypothesis can
delete a step (it deletes a step only when it is a few choices long; a step of bit-drawn
arguments is tens, and such steps were never deleted when measured).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import strategies as st

from chaos.hypothesis._steps import rule
from faults.kinds import TARGET_KIND, FaultKind
from faults.ranges import Choices, FloatRange, IntRange, ParamRange
from faults.space import FaultSpace, FaultTemplate


def choices(values: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.just(values[0]) if len(values) == 1 else st.sampled_from(values)


def integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.just(lo) if lo == hi else st.integers(lo, hi)


def seconds(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Seconds on the millisecond grid (one choice, as Hypothesis draws integers)."""
    return integers(round(lo * 1000), round(hi * 1000)).map(lambda ms: min(max(ms / 1000, lo), hi))


def _param(spec: ParamRange) -> st.SearchStrategy[Any]:
    if isinstance(spec, Choices):
        return choices(spec.values)
    if isinstance(spec, IntRange):
        return integers(spec.lo, spec.hi)
    assert isinstance(spec, FloatRange)
    return seconds(spec.lo, spec.hi)


def _arguments(space: FaultSpace, template: FaultTemplate) -> dict[str, st.SearchStrategy[Any]]:
    """A rule's arguments: the target, each ranged parameter, the duration when drawn."""
    arguments: dict[str, st.SearchStrategy[Any]] = {
        TARGET_KIND[template.kind].value: choices(space.targets_of(template))
    }
    arguments.update({name: _param(spec) for name, spec in sorted(template.params.items())})
    if template.duration_s is not None:
        arguments["duration_s"] = seconds(template.duration_s.lo, template.duration_s.hi)
    return arguments


def _fault_rule(name: str, kind: FaultKind, target_arg: str) -> Callable[..., None]:
    def inject_now(self: Any, **arguments: Any) -> None:
        target = arguments.pop(target_arg)
        duration = arguments.pop("duration_s", None)
        self.inject(kind, target, duration_s=duration, **arguments)

    inject_now.__name__ = inject_now.__qualname__ = name
    inject_now.__doc__ = f"Inject {kind.value} now (a rule drawn from the scenario's space)."
    return inject_now


def fault_rules(space: FaultSpace) -> Iterator[tuple[str, Any]]:
    """One rule per distinct fault template of ``space`` (its triggers aside), named after
    the kind (``crash``, ``crash_2``, ...); each marked ``_chaos_fault_rule``."""
    seen: list[tuple[Any, ...]] = []
    names: Counter[FaultKind] = Counter()
    for template in space.templates:
        arguments = _arguments(space, template)
        key = (
            template.kind,
            space.targets_of(template),
            tuple(sorted((k, v.model_dump_json()) for k, v in template.params.items())),
            None if template.duration_s is None else template.duration_s.model_dump_json(),
        )
        if key in seen:
            continue
        seen.append(key)
        names[template.kind] += 1
        count = names[template.kind]
        name = template.kind.value if count == 1 else f"{template.kind.value}_{count}"
        made = rule(**arguments)(_fault_rule(name, template.kind, TARGET_KIND[template.kind].value))
        made._chaos_fault_rule = True  # type: ignore[attr-defined]
        yield name, made


__all__ = ["choices", "fault_rules", "integers", "seconds"]
