"""Frozen pydantic base model whose validation errors are one-line ConfigErrors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

from ground.errors import ConfigError

_COMPARISONS = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}
_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "dict_type": "a table (dict)",
    "model_type": "a table (dict)",
    "tuple_type": "a list",
    "list_type": "a list",
    "bool_type": "a boolean",
}


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(err: ErrorDetails) -> str:
    """One error as a short sentence."""
    where, kind = _loc(err["loc"]), err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    got = _show(err.get("input"))
    if kind in _COMPARISONS:
        key, sign = _COMPARISONS[kind]
        return f"{where} must be {sign} {ctx[key]}, got {got}"
    if kind in _TYPE_WORDS:
        return f"{where} must be {_TYPE_WORDS[kind]}, got {got}"
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"unknown field {where}"
    if kind in ("literal_error", "enum"):
        return f"{where} must be one of {ctx['expected']}, got {got}"
    if kind == "union_tag_invalid":
        return f"{where}.type must be one of {ctx['expected_tags']}, got {_show(ctx['tag'])}"
    if kind == "string_pattern_mismatch":
        return f"{where} must match {ctx['pattern']}, got {got}"
    if kind == "too_short":
        return f"{where} must have at least {ctx['min_length']} item(s)"
    if kind == "union_tag_not_found":
        return f"{where}.type is required"
    if kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error", err["msg"]))
        if not where:
            return message
        return f"{where} {message}" if message.startswith("must ") else f"{where}: {message}"
    message = err["msg"][:1].lower() + err["msg"][1:]
    return f"{where}: {message}" if where else message


def one_line(error: ValidationError, *prefix: int | str) -> str:
    """The first validation error as one line (its location under ``prefix``), with a count."""
    errors = error.errors(include_url=False)
    first = _describe({**errors[0], "loc": (*prefix, *errors[0]["loc"])})
    return first if len(errors) == 1 else f"{first} (and {len(errors) - 1} more)"


def relocate(error: ValidationError, *prefix: int | str) -> ValidationError:
    """The same errors, located under ``prefix`` (to raise from inside a validator)."""
    details: list[Any] = []
    for err in error.errors(include_url=False):
        detail = {"type": err["type"], "loc": (*prefix, *err["loc"]), "input": err["input"]}
        details.append({**detail, "ctx": err["ctx"]} if "ctx" in err else detail)
    return ValidationError.from_exception_data(error.title, details)


_VALIDATING: ContextVar[bool] = ContextVar("faults_validating", default=False)


@contextmanager
def config_errors() -> Iterator[None]:
    """Turn a ValidationError into a one-line ConfigError, at the outermost model only.

    Nested models (validated inside another) let the ValidationError through, so the outer
    model reports it with its full location (``events[2].params.latency_ms``).
    """
    if _VALIDATING.get():
        yield
        return
    token = _VALIDATING.set(True)
    try:
        yield
    except ValidationError as error:
        raise ConfigError(one_line(error)) from error
    finally:
        _VALIDATING.reset(token)


class FrozenModel(BaseModel):
    """Immutable, strict-keyed model; bad input raises ConfigError, never ValidationError."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    def __init__(self, /, **data: Any) -> None:
        with config_errors():
            super().__init__(**data)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        with config_errors():
            model = super().model_validate(obj, **kwargs)
        return model

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Validate plain data (from TOML, JSON or msgpack) into a model."""
        return cls.model_validate(data)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible data; ``from_dict`` reads it back."""
        return self.model_dump(mode="json")
