"""Jepsen-style histories: operations invoked and completed by processes, faults by the nemesis.

Each ``Op`` is one line of the history: a process ``invoke``s an operation ``f`` and later
completes it with ``ok`` (it happened), ``fail`` (it certainly did not) or ``info`` (unknown:
it may or may not have happened). Faults are ops of the process ``"nemesis"``.

A process is one logical thread: it has at most one operation open at a time, so pairing an
invocation with its completion needs no ids (``History.pairs``)::

    p0  invoke write 1 ───────────── ok write 1          happened
    p1      invoke write 2 ── fail write 2               certainly did not happen
    p2        invoke write 3 ─────────── info write 3    may or may not have happened
    p3            invoke write 4 ······ (end)            pending: as unknown as info
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args, overload

from ground.errors import ConfigError

OpType = Literal["invoke", "ok", "fail", "info"]
_TYPES: tuple[str, ...] = get_args(OpType)

#: The process names the harness itself uses in a run's events (the one definition).
NEMESIS = "nemesis"  #: applies and heals faults: its ops are part of the history
HARNESS = "harness"  #: run phases (workload start/end, settle, final state)
PROXY = "proxy"  #: what the proxies saw (connections, toxics, NATS frames)
SERVICE_PREFIX = "service:"  #: ``service:NAME``: a service's start, exit and log lines


def is_observation(process: object) -> bool:
    """Whether events of ``process`` are the harness's observations (phases, proxies,
    service logs) rather than history operations."""
    name = str(process)
    return name in (HARNESS, PROXY) or name.startswith(SERVICE_PREFIX)


def is_client(process: object) -> bool:
    """Whether ``process`` is a workload client: neither an observation nor the nemesis."""
    return str(process) != NEMESIS and not is_observation(process)


@dataclass(frozen=True, slots=True)
class Op:
    """One history line: ``index`` orders the history, ``time_ns`` is since the run began."""

    index: int
    time_ns: int
    process: str
    type: OpType
    f: str
    value: Any = None
    error: str | None = None

    def __post_init__(self) -> None:
        for name in ("index", "time_ns"):
            number = getattr(self, name)
            if not isinstance(number, int) or isinstance(number, bool) or number < 0:
                raise ConfigError(f"op {name} must be an integer >= 0, got {number!r}")
        if self.type not in _TYPES:
            raise ConfigError(f"op type must be one of {', '.join(_TYPES)}, got {self.type!r}")
        if not isinstance(self.process, str) or not isinstance(self.f, str):
            raise ConfigError(f"op {self.index}: process and f must be strings")
        if self.error is not None and not isinstance(self.error, str):
            raise ConfigError(f"op {self.index}: error must be a string or None")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Op:
        """An op from plain data; ConfigError if a field is missing, unknown or mistyped."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ConfigError(f"op has unknown field(s): {', '.join(sorted(unknown))}")
        try:
            return cls(**data)
        except TypeError:
            missing = [n for n in ("index", "time_ns", "process", "type", "f") if n not in data]
            raise ConfigError(f"op is missing {', '.join(missing)}") from None


@dataclass(frozen=True, slots=True)
class Pair:
    """An invocation and its completion (None while it is still pending at the end)."""

    invoke: Op
    completion: Op | None

    @property
    def outcome(self) -> str:
        """``ok``, ``fail``, ``info`` or ``pending``."""
        return "pending" if self.completion is None else self.completion.type

    @property
    def happened(self) -> bool | None:
        """True (``ok``: it happened), False (``fail``: it certainly did not) or None
        (``info`` or still pending: it may or may not have happened)."""
        outcome = self.outcome
        return True if outcome == "ok" else False if outcome == "fail" else None

    @property
    def value(self) -> Any:
        """The completion's value when it has one (a read's result), else the invocation's."""
        if self.completion is not None and self.completion.value is not None:
            return self.completion.value
        return self.invoke.value


class History(Sequence[Op]):
    """An ordered, immutable sequence of ops (strictly increasing ``index``) with helpers."""

    def __init__(self, ops: Iterable[Op | Mapping[str, Any]] = ()) -> None:
        self._ops = tuple(op if isinstance(op, Op) else Op.from_dict(op) for op in ops)
        for before, after in zip(self._ops, self._ops[1:], strict=False):
            if after.index <= before.index:
                raise ConfigError(
                    f"history indices must increase: {after.index} after {before.index}"
                )

    @overload
    def __getitem__(self, key: int) -> Op: ...
    @overload
    def __getitem__(self, key: slice) -> History: ...
    def __getitem__(self, key: int | slice) -> Op | History:
        return History(self._ops[key]) if isinstance(key, slice) else self._ops[key]

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __repr__(self) -> str:
        return f"History({len(self._ops)} ops)"

    @classmethod
    def from_events(cls, events: Iterable[Mapping[str, Any]]) -> History:
        """The history of a run's recorded events: client and nemesis ops, in order, without
        the harness's observations (and without fields other than an op's own)."""
        fields = Op.__dataclass_fields__
        return cls(
            {k: e.get(k) for k in fields} for e in events if not is_observation(e.get("process"))
        )

    def by_f(self, f: str) -> History:
        """The ops of operation ``f``."""
        return History(op for op in self._ops if op.f == f)

    def by_process(self, process: str) -> History:
        return History(op for op in self._ops if op.process == process)

    def nemesis(self) -> History:
        """The fault operations."""
        return self.by_process(NEMESIS)

    def client(self) -> History:
        """Every op that is not the nemesis's."""
        return History(op for op in self._ops if op.process != NEMESIS)

    def pairs(self) -> tuple[Pair, ...]:
        """Each invocation with its process's next completion, in invocation order.

        ConfigError if a completion has no outstanding invocation, completes another
        operation than the one its process invoked, or a process invokes again before its
        previous operation completed.
        """
        open_ops: dict[str, int] = {}
        pairs: list[Pair] = []
        for op in self._ops:
            slot = open_ops.pop(op.process, None)
            if op.type == "invoke":
                if slot is not None:
                    raise ConfigError(
                        f"op {op.index}: process {op.process!r} invoked "
                        f"{op.f!r} while op {pairs[slot].invoke.index} is open"
                    )
                open_ops[op.process] = len(pairs)
                pairs.append(Pair(op, None))
            elif slot is None:
                raise ConfigError(
                    f"op {op.index}: {op.type} {op.f!r} by {op.process!r} completes no invocation"
                )
            elif op.f != pairs[slot].invoke.f:
                invoked = pairs[slot].invoke
                raise ConfigError(
                    f"op {op.index}: {op.type} {op.f!r} by {op.process!r} completes "
                    f"{invoked.f!r} (op {invoked.index})"
                )
            else:
                pairs[slot] = Pair(pairs[slot].invoke, op)
        return tuple(pairs)

    def completed(self, f: str | None = None, outcome: str = "ok") -> tuple[Pair, ...]:
        """The pairs (of operation ``f``, if given) that completed with ``outcome``."""
        return tuple(
            p for p in self.pairs() if p.outcome == outcome and (f is None or p.invoke.f == f)
        )

    def to_list(self) -> list[dict[str, Any]]:
        return [op.to_dict() for op in self._ops]
