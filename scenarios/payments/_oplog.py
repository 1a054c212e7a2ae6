"""Operation lines a service under test prints for the run's history: ``@op {json}``."""

from __future__ import annotations

import json
import sys
from typing import Any


def op(type_: str, f: str, value: Any = None, error: str | None = None, **extra: Any) -> None:
    """Print one history operation (invoke, ok, fail or info) on stdout, flushed."""
    record: dict[str, Any] = {"type": type_, "f": f, "value": value}
    if error is not None:
        record["error"] = error
    record.update(extra)
    sys.stdout.write("@op " + json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()
