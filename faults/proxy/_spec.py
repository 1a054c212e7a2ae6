"""A toxic as configured on a proxy: name, stream, toxicity and the toxic itself."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from faults.proxy.toxics.base import Toxic

_uids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ToxicSpec:
    """Immutable; an update makes a new spec with a new ``uid`` (which restarts the toxic)."""

    name: str
    stream: str
    toxicity: float
    toxic: Toxic
    uid: int = field(default_factory=lambda: next(_uids))

    @property
    def type(self) -> str:
        return self.toxic.type_name

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.toxic.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }
