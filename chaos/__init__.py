"""chaos-harness: the run, the engines and the faces (docs/architecture.md). Importing
``chaos`` loads nothing else; ``chaos.grade`` and ``chaos.Grade``, the grading API, load the
grading engine on first use (PEP 562)."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("grade", "Grade"):
        from chaos import grading

        return getattr(grading, name)
    raise AttributeError(f"module 'chaos' has no attribute {name!r}")
