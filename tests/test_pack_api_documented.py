"""docs/scenarios.md is enough (issue 22): every name a built-in pack imports from the
harness is documented in docs/scenarios.md or in docs/architecture.md's API table, and so is
every harness attribute the brief names (zygote_preload, ctx.recorder.now_ns, ctx.stack,
REGISTRY's shape, pack_program against -m)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ("ground", "chaos", "faults", "replay", "invariants")


def _docs() -> str:
    scenarios = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = architecture.split("## The API a pack may use", 1)[1]
    return scenarios + table


def _imported() -> dict[str, list[str]]:
    """``module.name`` -> the pack files importing it, for every harness import of a pack."""
    found: dict[str, list[str]] = {}
    for file in sorted((ROOT / "scenarios").rglob("*.py")):
        where = str(file.relative_to(ROOT))
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] in HARNESS:
                    for alias in node.names:
                        found.setdefault(f"{node.module}.{alias.name}", []).append(where)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in HARNESS:
                        found.setdefault(alias.name, []).append(where)
    return found


def test_the_packs_import_something_of_the_harness() -> None:
    names = _imported()
    assert "chaos.scenario.Scenario" in names
    assert "invariants.register" in names
    assert len(names) > 20


def test_every_name_a_builtin_pack_imports_is_documented() -> None:
    docs = _docs()
    missing = {
        name: files
        for name, files in _imported().items()
        if not re.search(rf"(?<!\w){re.escape(name.rsplit('.', 1)[1])}(?!\w)", docs)
        or not re.search(rf"\b{re.escape(name.rsplit('.', 1)[0])}\b", docs)
    }
    assert missing == {}, "undocumented in docs/scenarios.md or the API table: " + ", ".join(
        f"{name} ({files[0]})" for name, files in sorted(missing.items())
    )


def test_the_attributes_the_issue_names_are_documented() -> None:
    docs = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    for needle in ("zygote_preload", "ctx.recorder.now_ns()", "ctx.stack.push_async_callback",
                   "namespace -> name -> checker", "ctx.pack_program", '"-m"',
                   "variant_descriptions", "invariants.history.HARNESS"):  # fmt: skip
        assert needle in docs, needle
