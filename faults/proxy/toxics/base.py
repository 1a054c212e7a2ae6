"""The toxic interface: a named type with integer attributes and a ``pipe`` coroutine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from faults.proxy.errors import BadRequest

if TYPE_CHECKING:
    from faults.proxy._stage import Stage


class Toxic:
    """Base of every toxic. Subclasses declare ``type_name`` and ``attribute_names``.

    A toxic instance holds its (validated) attributes and is immutable: an update builds a
    new instance. ``pipe`` runs once per direction of each connection the toxic is active
    on; it is cancelled when the chain changes and must keep every chunk it holds in
    ``stage.pending`` so nothing is lost (see ``faults.proxy._stage``). A chunk it has sent
    on in pieces is let go with ``stage.release()``; one it discards goes through
    ``stage.drop()`` (or ``stage.close()``), which commits the direction to ending the
    connection: a stream with a gap is never continued, even after the toxic is removed.
    """

    type_name: ClassVar[str] = ""
    attribute_names: ClassVar[tuple[str, ...]] = ()
    #: Attributes that are strings (default ""); only the project's extension toxics have any.
    string_attribute_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **attributes: int | str) -> None:
        self.attributes: dict[str, int | str] = {k: 0 for k in self.attribute_names}
        self.attributes.update({k: "" for k in self.string_attribute_names})
        self.attributes.update(attributes)
        self.check()

    def __getattr__(self, name: str) -> Any:
        """An attribute by name (``self.latency``): an int, or a str for string ones."""
        attrs = self.__dict__.get("attributes", {})
        if name in attrs:
            return attrs[name]
        raise AttributeError(name)

    def text(self, name: str) -> str:
        """A string attribute."""
        return str(self.attributes[name])

    @classmethod
    def from_json(cls, raw: Any, base: dict[str, int | str] | None = None) -> Toxic:
        """Build from a JSON ``attributes`` object, merged over ``base``; unknown keys dropped."""
        merged: dict[str, int | str] = dict(base or {})
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise BadRequest("bad request body: attributes must be an object")
        by_lower = {k.lower(): k for k in (*cls.attribute_names, *cls.string_attribute_names)}
        for key, value in raw.items():
            name = by_lower.get(str(key).lower())
            if name is None:
                continue
            if name in cls.string_attribute_names:
                if not isinstance(value, str) or len(value) > 1024:
                    raise BadRequest(f"bad request body: attribute {name} must be a string")
                merged[name] = value
            else:
                merged[name] = _as_int(name, value)
        return cls(**merged)

    def check(self) -> None:
        """Reject attribute values this toxic cannot honour (raise ``BadRequest``)."""
        for name, value in self.attributes.items():
            if name in self.string_attribute_names:
                continue
            if name not in self.attribute_names or isinstance(value, str):
                raise BadRequest(f"unknown attribute {name!r} for toxic type {self.type_name}")
            if value < 0:
                raise BadRequest(f"{name} must be >= 0, got {value}")

    async def pipe(self, stage: Stage) -> None:
        """Pass every chunk through unchanged."""
        while True:
            await stage.receive()
            await stage.forward()


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"bad request body: attribute {name} must be an integer, got {value!r}")
    if abs(value) > 2**63 - 1:
        raise BadRequest(f"bad request body: attribute {name} is out of range")
    return value
