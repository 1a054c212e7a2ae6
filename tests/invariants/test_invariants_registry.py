"""Invariants by name: generic and per-pack namespaces, lookup order, re-registration."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import invariants
from ground.errors import ConfigError
from invariants.registry import REGISTRY, get, known, register
from invariants.verdict import Verdict


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test registers into a copy; the real registry is left as it was."""
    monkeypatch.setattr(
        "invariants.registry.REGISTRY", {ns: dict(names) for ns, names in REGISTRY.items()}
    )
    yield


def _says(text: str) -> Any:
    def check(history: invariants.History, final_state: Mapping[str, Any]) -> Verdict:
        return Verdict.holds("x", text)

    return check


def _text(name: str, pack: str | None = None) -> str:
    return get(name, pack=pack).check(invariants.History(), {}).explanation


def test_register_and_describe() -> None:
    @register("always")
    def always(history: invariants.History, final_state: object) -> Verdict:
        """Always holds."""
        return Verdict.holds("always", "fine.")

    assert get("always") is always
    assert get("always", pack="anypack") is always  # generic names are visible from packs
    assert always.name == "always"
    assert always.description == "Always holds."


def test_a_pack_name_is_found_only_from_its_pack() -> None:
    register("balanced", pack="bank")(_says("bank's"))
    assert _text("balanced", pack="bank") == "bank's"
    with pytest.raises(ConfigError, match=r"^unknown invariant 'balanced' \(known: "):
        get("balanced")
    with pytest.raises(ConfigError, match=r"^unknown invariant 'balanced' \(known: "):
        get("balanced", pack="shop")


def test_two_packs_share_a_short_name_and_the_pack_wins_over_generic() -> None:
    register("balanced")(_says("generic"))
    register("balanced", pack="bank")(_says("bank's"))
    register("balanced", pack="shop")(_says("shop's"))
    assert _text("balanced", pack="bank") == "bank's"
    assert _text("balanced", pack="shop") == "shop's"
    assert _text("balanced", pack="elsewhere") == "generic"
    assert get("balanced", pack="bank").name == "balanced"  # verdicts keep the short name


def test_registering_a_name_again_replaces_it() -> None:
    register("balanced", pack="bank")(_says("first"))
    register("balanced", pack="bank")(_says("second"))  # a pack module imported twice
    assert _text("balanced", pack="bank") == "second"


def test_unknown_names_list_the_known_ones_in_scope() -> None:
    register("generic_one")(_says(""))
    register("bank_one", pack="bank")(_says(""))
    register("shop_one", pack="shop")(_says(""))
    assert {"generic_one", "bank_one"} <= set(known("bank"))
    assert "shop_one" not in known("bank")
    with pytest.raises(ConfigError) as caught:
        get("exactly_twice", pack="bank")
    message = str(caught.value)
    assert message.startswith("unknown invariant 'exactly_twice' (known: ")
    assert "bank_one" in message
    assert "generic_one" in message
    assert "shop_one" not in message


def test_the_generic_layer_loads_no_pack() -> None:
    import subprocess
    import sys

    code = "import invariants, sys; print([m for m in sys.modules if m.startswith('scenarios')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
