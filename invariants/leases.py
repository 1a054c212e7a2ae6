"""Leases and the writes made under them, read from the history of trusted processes.

The lease checkers (``fencing_tokens``, ``exclusive_leases``) judge a run from two kinds of
evidence, each reported by a process the scenario trusts, never by the workers under test
(a worker could print anything). ``final_state["lease_evidence"]`` names those processes::

    {"authority": "lease-audit", "resource": "store", "tolerance_s": 0.0}

authority
    what the lock service did, one ``invoke``/``ok`` pair per fact (``f`` is the fact):

    ==========  =====================================================================
    ``grant``   ``{"token", "holder", "at", "until"}``: lease ``token`` granted to holder
    ``renew``   ``{"token", "by", "at", "until"}``: its expiry set again, by anyone
    ``release`` ``{"token", "by", "at"}``: given up (it ends at ``at``)
    ==========  =====================================================================

    ``until`` is when the fact lets the lease run out: a renewal replaces the expiry (it may
    shorten it), so a lease is valid from each fact's ``at`` to the earlier of its ``until``
    and the next fact's ``at``.

resource
    every write it received: ``invoke`` ``{"writer", "token"}`` (``token`` null: a write
    sent without a fencing token), then ``ok`` (accepted), ``fail`` (rejected) or ``info``
    (unknown); a write with no completion at the end is unknown too. Accepted writes carry
    ``"at"``, when the resource accepted them (in the completion, else the invocation).

``at`` and ``until`` are seconds on one clock that authority and resource share. Each value
may name its lease (``"lease"``, default ``""``); leases of different names are independent.

Every accepted write is *attributed* to a lease: the lease of the token it carried, or,
when it carried none, the lease its writer was most recently granted before the write.
Only certain writes (``ok``) can prove a violation; unknown ones are counted, never used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from invariants.history import History, Op, Pair

EVIDENCE_KEY = "lease_evidence"
AUTHORITY_FACTS = ("grant", "renew", "release")


class MalformedEvidence(ValueError):
    """The lease evidence (its config or an op's value) does not have the documented shape."""


@dataclass(frozen=True)
class Sources:
    """Which processes of the history are trusted, and the clock tolerance between them."""

    authority: tuple[str, ...]
    resource: tuple[str, ...]
    #: Overlaps and grant/write orderings within this many seconds are not violations.
    tolerance_s: float = 0.0

    @classmethod
    def from_state(cls, final_state: Mapping[str, Any]) -> Sources:
        config = final_state.get(EVIDENCE_KEY) if isinstance(final_state, Mapping) else None
        if not isinstance(config, Mapping):
            raise MalformedEvidence(
                f"final_state has no {EVIDENCE_KEY!r} naming the trusted processes "
                '(e.g. {"authority": "lease-audit", "resource": "store"})'
            )

        def names(key: str) -> tuple[str, ...]:
            value = config.get(key)
            found = (value,) if isinstance(value, str) else value
            if (
                not isinstance(found, list | tuple)
                or not found
                or not all(isinstance(n, str) and n for n in found)
            ):
                raise MalformedEvidence(
                    f"final_state[{EVIDENCE_KEY!r}][{key!r}] must name a process (or a "
                    f"list of them), got {value!r}"
                )
            return tuple(found)

        tolerance = config.get("tolerance_s", 0.0)
        if not _number(tolerance) or tolerance < 0:
            raise MalformedEvidence(
                f"final_state[{EVIDENCE_KEY!r}]['tolerance_s'] must be a number >= 0, "
                f"got {tolerance!r}"
            )
        return cls(names("authority"), names("resource"), float(tolerance))


@dataclass(frozen=True)
class Fact:
    """One thing the authority did to a lease."""

    kind: str  # grant | renew | release
    lease: str
    token: int
    actor: str  # the holder for a grant, whoever renewed or released otherwise
    at: float
    until: float
    op: Op


@dataclass
class Lease:
    """One granted lease (one token) and what happened to it afterwards."""

    lease: str
    token: int
    holder: str
    granted: Fact
    facts: list[Fact] = field(default_factory=list)

    def validity(self) -> list[tuple[float, float]]:
        """The intervals during which the authority's facts held this lease valid."""
        facts = sorted(self.facts, key=lambda fact: fact.at)
        out: list[tuple[float, float]] = []
        for i, fact in enumerate(facts):
            following = facts[i + 1].at if i + 1 < len(facts) else math.inf
            end = min(fact.until, following)
            if end > fact.at:
                out.append((fact.at, end))
        return out

    def foreign_renewals(self) -> list[Fact]:
        """Renewals of this lease by someone other than its holder."""
        return [f for f in self.facts if f.kind == "renew" and f.actor != self.holder]


@dataclass(frozen=True)
class Write:
    """One write the resource received and, if it was accepted, the lease it went under."""

    pair: Pair
    writer: str
    lease: str
    #: The fencing token the write carried (None: it carried none).
    sent: int | None
    #: When the resource decided (None for an unknown write that reported no time).
    at: float | None
    #: The attributed lease's token (accepted writes only; None if none could be found).
    token: int | None = None
    #: Why the attribution itself is a violation (a token not granted to the writer...).
    problem: str | None = None

    @property
    def accepted(self) -> bool | None:
        """True (ok), False (rejected) or None (unknown)."""
        return self.pair.happened

    @property
    def time_s(self) -> float:
        """When the write completed in the run's history (seconds since the run began)."""
        op = self.pair.completion or self.pair.invoke
        return op.time_ns / 1e9


@dataclass
class Evidence:
    sources: Sources
    leases: dict[tuple[str, int], Lease]
    #: Every grant, in the order the authority reported them.
    grants: list[Fact]
    #: Every write the resource received, in the order it decided them.
    writes: list[Write]

    def accepted(self) -> list[Write]:
        return [w for w in self.writes if w.accepted is True]

    def unknown(self) -> list[Write]:
        return [w for w in self.writes if w.accepted is None]

    def rejected(self) -> list[Write]:
        return [w for w in self.writes if w.accepted is False]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _field(op: Op, value: Any, name: str, kind: str) -> Any:
    where = f"op {op.index} ({op.process} {op.type} {op.f})"
    if not isinstance(value, Mapping):
        raise MalformedEvidence(f"{where}: value must be a map, got {value!r}")
    if name not in value:
        raise MalformedEvidence(f"{where}: value has no {name!r}")
    found = value[name]
    ok = {
        "str": isinstance(found, str),
        "int": isinstance(found, int) and not isinstance(found, bool),
        "number": _number(found),
        "token": found is None or (isinstance(found, int) and not isinstance(found, bool)),
    }[kind]
    if not ok:
        wanted = {"token": "an integer or null", "number": "a finite number"}.get(kind, kind)
        raise MalformedEvidence(f"{where}: {name!r} must be {wanted}, got {found!r}")
    return found


def _lease_name(op: Op, value: Mapping[str, Any]) -> str:
    name = value.get("lease", "")
    if not isinstance(name, str):
        raise MalformedEvidence(f"op {op.index}: 'lease' must be a string, got {name!r}")
    return name


def _facts(history: History, processes: Iterable[str]) -> list[Fact]:
    wanted = set(processes)
    out: list[Fact] = []
    for pair in History(op for op in history if op.process in wanted).pairs():
        if pair.invoke.f not in AUTHORITY_FACTS or pair.happened is not True:
            continue
        op = pair.completion or pair.invoke
        value = pair.value
        kind = pair.invoke.f
        actor = _field(op, value, "holder" if kind == "grant" else "by", "str")
        at = float(_field(op, value, "at", "number"))
        until = at if kind == "release" else float(_field(op, value, "until", "number"))
        token = _field(op, value, "token", "int")
        out.append(Fact(kind, _lease_name(op, value), token, actor, at, until, op))
    return out


def _writes(history: History, processes: Iterable[str]) -> list[Write]:
    wanted = set(processes)
    pairs = [
        p
        for p in History(op for op in history if op.process in wanted).pairs()
        if p.invoke.f == "write"
    ]
    # the order the resource decided them in (a pending write sorts by its invocation)
    pairs.sort(key=lambda p: (p.completion or p.invoke).index)
    out = []
    for pair in pairs:
        op = pair.completion or pair.invoke
        value = pair.value
        writer = _field(op, value, "writer", "str")
        sent = _field(pair.invoke, pair.invoke.value, "token", "token")
        at = value.get("at") if isinstance(value, Mapping) else None
        if at is None and isinstance(pair.invoke.value, Mapping):
            at = pair.invoke.value.get("at")
        if pair.happened is True and not _number(at):
            raise MalformedEvidence(
                f"op {op.index} ({op.process} ok write): an accepted write needs 'at', got {at!r}"
            )
        out.append(
            Write(pair, writer, _lease_name(op, value), sent, None if at is None else float(at))
        )
    return out


def _attribute(
    write: Write, leases: Mapping[tuple[str, int], Lease], grants: list[Fact], tolerance: float
) -> Write:
    """The accepted ``write`` with the lease it went under (or the problem with it)."""
    assert write.at is not None
    if write.sent is not None:
        lease = leases.get((write.lease, write.sent))
        problem = None
        if lease is None:
            problem = "a token never granted"
        elif lease.holder != write.writer:
            problem = f"granted to {lease.holder}"
        elif lease.granted.at > write.at + tolerance:
            problem = "before it was granted"
        return _with(write, write.sent, problem)
    mine = [
        g
        for g in grants
        if g.lease == write.lease and g.actor == write.writer and g.at <= write.at + tolerance
    ]
    if not mine:
        return _with(write, None, "without ever having been granted a lease")
    return _with(write, max(mine, key=lambda g: g.at).token, None)


def _with(write: Write, token: int | None, problem: str | None) -> Write:
    return Write(write.pair, write.writer, write.lease, write.sent, write.at, token, problem)


def read_evidence(history: History, final_state: Mapping[str, Any]) -> Evidence:
    """The leases and writes of a run, from the processes ``final_state`` names as trusted.

    ``MalformedEvidence`` (or ``ConfigError`` from pairing) if the evidence is not well
    formed: a checker that calls this reports ``unknown`` then, never a verdict on bad data.
    """
    sources = Sources.from_state(final_state)
    facts = _facts(history, sources.authority)
    grants = [f for f in facts if f.kind == "grant"]
    leases: dict[tuple[str, int], Lease] = {}
    for grant in grants:
        key = (grant.lease, grant.token)
        if key not in leases:  # a token granted twice: the first grant names the lease
            leases[key] = Lease(grant.lease, grant.token, grant.actor, grant)
    for fact in facts:
        found = leases.get((fact.lease, fact.token))
        if found is not None and (fact.kind != "grant" or found.granted is fact):
            found.facts.append(fact)
    writes = [
        _attribute(w, leases, grants, sources.tolerance_s) if w.accepted is True else w
        for w in _writes(history, sources.resource)
    ]
    return Evidence(sources, leases, grants, writes)


def seconds(value: float) -> str:
    """A run time or a duration for an explanation: ``7.012 s``."""
    return f"{value:.3f} s"


__all__ = [
    "AUTHORITY_FACTS",
    "EVIDENCE_KEY",
    "Evidence",
    "Fact",
    "Lease",
    "MalformedEvidence",
    "Sources",
    "Write",
    "read_evidence",
    "seconds",
]
