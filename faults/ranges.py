"""Closed ranges and choice sets a fault space draws parameters from."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import Field, model_validator

from faults._validation import FrozenModel


class FloatRange(FrozenModel):
    """Numbers from ``lo`` to ``hi`` inclusive (drawn on a millisecond grid)."""

    lo: Annotated[float, Field(strict=True)]
    hi: Annotated[float, Field(strict=True)]

    @model_validator(mode="before")
    @classmethod
    def _bounds(cls, data: Any) -> Any:
        """Accept ``[lo, hi]`` and a single value ``x`` (meaning ``[x, x]``) besides a dict."""
        if isinstance(data, list | tuple):
            if len(data) != 2:
                raise ValueError(f"must be [min, max], got {list(data)!r}")
            return {"lo": data[0], "hi": data[1]}
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"lo": data, "hi": data}
        if not isinstance(data, dict | FrozenModel):
            raise ValueError(f"must be [min, max] or a number, got {data!r}")
        return data

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.lo > self.hi:
            raise ValueError(f"min {self.lo} > max {self.hi}")
        return self


class IntRange(FloatRange):
    """Integers from ``lo`` to ``hi`` inclusive; written ``[lo, hi]`` or ``x``."""

    lo: Annotated[int, Field(strict=True)]
    hi: Annotated[int, Field(strict=True)]


class Choices(FrozenModel):
    """A set of allowed string values; written as a list or a single string."""

    values: Annotated[tuple[str, ...], Field(min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def _as_values(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"values": [data]}
        if isinstance(data, list | tuple):
            return {"values": data}
        if not isinstance(data, dict | FrozenModel):
            raise ValueError(f"must be a list of choices or one choice, got {data!r}")
        return data


ParamRange = IntRange | FloatRange | Choices
