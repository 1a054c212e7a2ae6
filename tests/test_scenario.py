"""The scenario author's API: a pack written against it loads, reads its faults.toml, resolves
its own checkers, and says which invariants mean "the final state is consistent"."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import chaos.context
import chaos.nemesis
import chaos.run
import chaos.scenario
from chaos.scenario import Scenario, Signal, load_scenario
from faults.kinds import TargetKind
from ground.errors import ConfigError
from invariants import History

#: A pack written against the paths of the API a pack may use (docs/architecture.md).
PACK = '''
from chaos.context import RunContext
from chaos.nemesis import Subject
from chaos.scenario import Scenario
from chaos.services import free_port
from faults.space import FaultSpace
from invariants import History, Verdict, register


@register("balanced", pack="{id}")
def balanced(history: History, final_state) -> Verdict:
    """Every account balances."""
    return Verdict.holds("balanced", "{id}'s own balanced")


@register("no_debt", pack="{id}")
def no_debt(history: History, final_state) -> Verdict:
    return Verdict.violated("no_debt", "somebody owes")


class Bank(Scenario):
    id = "{id}"
    variants = {{"golden": "the reference", "sloppy": "the broken one"}}
    invariants = ("balanced", "no_debt")
    consistency = {consistency}
    subjects = {{"orders": Subject("orders.new", "ORDERS", "c-nats", "p-nats")}}
    port = free_port()
{extra}
    async def setup(self, ctx: RunContext) -> None: ...
    async def workload(self, ctx: RunContext) -> None: ...
    async def settled(self, ctx: RunContext) -> bool:
        return True
    async def final_state(self, ctx: RunContext) -> dict:
        return {{}}


SCENARIO = Bank()
'''

SPACE = """
[{variant}]
horizon_s = 2.0
min_events = 1
max_events = 1
links = ["c-nats"]

[[{variant}.templates]]
kind = "latency"
params = {{ latency_ms = [10, 20] }}
duration_s = [0.5, 1.0]
"""


def write_pack(
    root: Path,
    id: str = "bank",
    consistency: str = "None",
    faults: str | None = None,
    extra: str = "",
) -> Path:
    folder = root / id
    folder.mkdir()
    body = PACK.format(id=id, consistency=consistency, extra=extra)
    (folder / "scenario.py").write_text(body)
    if faults is None:
        faults = SPACE.format(variant="golden") + SPACE.format(variant="sloppy")
    (folder / "faults.toml").write_text(faults)
    return folder


def test_a_pack_on_the_stable_api_loads_and_reads_its_fault_spaces(tmp_path: Path) -> None:
    scenario = load_scenario(str(write_pack(tmp_path)))
    assert scenario.id == "bank"
    space = scenario.fault_space("sloppy")
    assert space.declared(TargetKind.LINK) == ("c-nats",)
    assert space.content_hash() == scenario.fault_space("golden").content_hash()
    assert chaos.run.RunContext is chaos.context.RunContext


@pytest.mark.parametrize("old", ["chaos.scenario", "chaos.context"])
def test_the_old_paths_of_subject_warn_and_give_the_same_class(old: str) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old}.Subject moved to chaos.nemesis.Subject"):
        assert module.Subject is chaos.nemesis.Subject


def test_its_checkers_resolve_in_its_own_namespace(tmp_path: Path) -> None:
    scenario = load_scenario(str(write_pack(tmp_path)))
    other = load_scenario(str(write_pack(tmp_path, id="shop")))
    mine = [c.check(History(), {}) for c in scenario.checkers()]
    theirs = [c.check(History(), {}) for c in other.checkers()]
    assert [v.name for v in mine] == ["balanced", "no_debt"]  # short names in verdicts
    assert mine[0].explanation == "bank's own balanced"
    assert theirs[0].explanation == "shop's own balanced"


@pytest.mark.parametrize(
    "line",
    ["settle_stuck_s = -1.0", "settle_timeout_s = 0", "settle_stuck_s = float('nan')",
     "settle_timeout_s = '30'", "settle_stuck_s = True"],
)  # fmt: skip
def test_a_settle_time_that_is_not_seconds_above_zero_is_refused(
    tmp_path: Path, line: str
) -> None:
    folder = write_pack(tmp_path, extra=f"    {line}\n")
    name = line.split(" =")[0]
    with pytest.raises(ConfigError, match=f"{name} must be a number of seconds > 0"):
        load_scenario(str(folder))


def test_loading_a_pack_twice_is_harmless(tmp_path: Path) -> None:
    folder = write_pack(tmp_path)
    first = load_scenario(str(folder))
    again = load_scenario(str(folder))  # its module runs again: register replaces
    assert [c.name for c in again.checkers()] == [c.name for c in first.checkers()]


def test_an_unknown_invariant_is_a_config_error_naming_the_known_ones(tmp_path: Path) -> None:
    scenario = load_scenario(str(write_pack(tmp_path)))
    type(scenario).invariants = ("balanced", "solvent")
    with pytest.raises(ConfigError, match=r"^unknown invariant 'solvent' \(known: .*balanced"):
        scenario.checkers()


@pytest.mark.parametrize(
    ("consistency", "expected"),
    [("None", ("balanced", "no_debt")), ("('balanced',)", ("balanced",))],
)
def test_consistency_defaults_to_every_invariant(
    tmp_path: Path, consistency: str, expected: tuple[str, ...]
) -> None:
    scenario = load_scenario(str(write_pack(tmp_path, consistency=consistency)))
    assert scenario.consistency_invariants() == expected


def test_consistency_must_name_checked_invariants(tmp_path: Path) -> None:
    scenario = load_scenario(str(write_pack(tmp_path, consistency="('solvent',)")))
    with pytest.raises(ConfigError, match="consistency names solvent, which it does not check"):
        scenario.consistency_invariants()


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        (None, r"faults\.toml: cannot read the fault spaces: No such file"),
        ("golden = [", r"faults\.toml: not valid TOML: "),
        (SPACE.format(variant="golden"), r"faults\.toml: no table \[sloppy\] \(tables: golden\)"),
        (
            SPACE.format(variant="golden") + "[sloppy]\nhorizon_s = -1\n",
            r"faults\.toml \[sloppy\]: horizon_s",
        ),
    ],
)
def test_a_missing_or_bad_faults_toml_names_the_file_and_variant(
    tmp_path: Path, faults: str | None, message: str
) -> None:
    folder = write_pack(tmp_path, faults=faults or "")
    if faults is None:
        (folder / "faults.toml").unlink()
    scenario = load_scenario(str(folder))
    with pytest.raises(ConfigError, match=message):
        scenario.fault_space("sloppy")


def test_an_unknown_variant_is_refused_before_the_file_is_read(tmp_path: Path) -> None:
    scenario = load_scenario(str(write_pack(tmp_path)))
    with pytest.raises(ConfigError, match=r"has no variant 'nope' \(it has: golden, sloppy\)"):
        scenario.fault_space("nope")


def test_every_builtin_scenario_is_a_scenario() -> None:
    for name in chaos.scenario.builtin_scenarios():
        assert isinstance(load_scenario(name), Scenario)


# -- Signal: what a defective variant's failing trace must show ----------------------------


_EVENTS = [
    {"process": "service:consumer", "type": "info", "f": "log", "value": "charging o-010"},
    {"process": "proxy", "type": "info", "f": "frame_dropped", "value": {"op": "ack", "seq": 7}},
    {"process": "consumer", "type": "ok", "f": "charge", "value": "o-010"},
]


def test_signal_matches_every_set_field() -> None:
    assert Signal("charged", process="consumer", f="charge", type="ok").found_in(_EVENTS)
    assert not Signal("charged", process="consumer", f="charge", type="fail").found_in(_EVENTS)
    assert not Signal("other order", process="consumer", match="o-011").found_in(_EVENTS)


def test_signal_regex_reads_structured_values_as_sorted_json() -> None:
    assert Signal("ack dropped", f="frame_dropped", match='"op": "ack"').found_in(_EVENTS)
    assert Signal("log", f="log", match=r"charging o-\d+").found_in(_EVENTS)
    assert not Signal("ack of seq 8", f="frame_dropped", match='"seq": 8').found_in(_EVENTS)


def test_signal_refuses_a_bad_regex_and_an_empty_description() -> None:
    with pytest.raises(ConfigError, match="bad regex"):
        Signal("broken", match="(")
    with pytest.raises(ConfigError, match="description"):
        Signal("  ")
