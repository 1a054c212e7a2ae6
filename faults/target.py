"""Fault targets: a proxied link, a service process or a message subject."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import StringConstraints, model_validator

from faults._validation import FrozenModel
from faults.kinds import TargetKind

Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.*>:/-]*$"),
]
"""A link, service or subject name: no spaces, at most 200 characters."""


class Target(FrozenModel):
    """A named link (``consumer-postgres``), service (``postgres``) or subject (``orders``)."""

    kind: TargetKind
    name: Name

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        """Accept the short form ``"link:consumer-postgres"``."""
        if isinstance(data, str):
            kind, sep, name = data.partition(":")
            if not sep:
                raise ValueError(f"must look like 'link:NAME', got {data!r}")
            return {"kind": kind, "name": name}
        return data

    @classmethod
    def link(cls, name: str) -> Target:
        return cls(kind=TargetKind.LINK, name=name)

    @classmethod
    def service(cls, name: str) -> Target:
        return cls(kind=TargetKind.SERVICE, name=name)

    @classmethod
    def subject(cls, name: str) -> Target:
        return cls(kind=TargetKind.SUBJECT, name=name)

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"
