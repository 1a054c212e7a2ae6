"""One home per public name (as trio's test_exports): every name a public module exports (its
``__all__``) is exported by exactly one public module, so a reader and a pack find each name
in one place. A public module is one whose dotted path has no part starting with ``_``.

A package that gathers its submodules' names (``chaos.services``, ``chaos.sandbox``,
``chaos.nemesis``, ``invariants``) is their home: the submodules keep them out of their own
``__all__``. Old paths kept for one release (``ground._moved`` shims) export nothing.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ground", "chaos", "faults", "replay", "invariants")


def public_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            parts = list(file.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if not any(part.startswith("_") for part in parts):
                found[".".join(parts)] = file
    return found


MODULES = public_modules()


def declared_all(file: Path) -> list[str] | None:
    for node in ast.parse(file.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                value = ast.literal_eval(node.value)
                assert isinstance(value, list | tuple), f"{file}: __all__ is not a literal list"
                return list(value)
    return None


EXPORTS = {module: declared_all(file) or [] for module, file in MODULES.items()}


def test_every_exported_name_has_exactly_one_home() -> None:
    homes: dict[str, list[str]] = defaultdict(list)
    for module, names in EXPORTS.items():
        for name in names:
            homes[name].append(module)
    shared = {name: where for name, where in homes.items() if len(where) > 1}
    assert shared == {}, "\n".join(f"{n}: {', '.join(w)}" for n, w in sorted(shared.items()))


def test_no_module_exports_a_name_twice() -> None:
    doubled = {m: names for m, names in EXPORTS.items() if len(names) != len(set(names))}
    assert doubled == {}


@pytest.mark.parametrize("module", sorted(m for m, names in EXPORTS.items() if names))
def test_each_exported_name_is_there(module: str) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in EXPORTS[module] if name not in vars(loaded)]
    assert missing == []


def test_the_checker_reads_both_spellings_of_all(tmp_path: Path) -> None:
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_text('__all__ = ["Thing", "other"]\n')
    two.write_text('__all__: list[str] = ["Thing"]\n')
    assert declared_all(one) == ["Thing", "other"]
    assert declared_all(two) == ["Thing"]
