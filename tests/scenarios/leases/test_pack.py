"""The leases pack: what it declares (variants, checkers, catches, signals, task, fault
spaces) is consistent, and each variant differs from the golden worker in one property."""

from __future__ import annotations

import pytest

import invariants
from chaos.scenario import load_scenario
from faults.kinds import FaultKind
from faults.schedule import generate
from scenarios.leases import variants
from scenarios.leases.lease import GoldenLease

LEASES = load_scenario("leases")


def test_the_pack_lists_its_variants_once_and_checks_generic_and_own_invariants() -> None:
    assert (
        list(LEASES.variants)
        == list(variants.VARIANTS)
        == [
            "golden",
            "no-fencing",
            "wall-clock-expiry",
            "renew-without-owner-check",
        ]
    )
    assert [c.name for c in LEASES.checkers()] == [
        "fencing_tokens",
        "exclusive_leases",
        "job_recovered",
        "lease_failover",
    ]
    assert {"job_recovered", "lease_failover"} <= set(invariants.REGISTRY["leases"])
    assert {"fencing_tokens", "exclusive_leases"} <= set(invariants.REGISTRY[None])
    assert set(LEASES.catches) == set(LEASES.signals) == set(LEASES.variants) - {"golden"}
    assert set(LEASES.catches.values()) <= set(LEASES.invariants)


@pytest.mark.parametrize(
    ("variant", "differs"),
    [
        ("no-fencing", {"fence"}),
        ("wall-clock-expiry", {"now_sql", "now_params"}),
        ("renew-without-owner-check", {"renew_sql"}),
    ],
)
def test_each_variant_is_the_golden_lease_minus_one_property(
    variant: str, differs: set[str]
) -> None:
    cls = variants.lease_for(variant)
    assert cls.__mro__[1] is GoldenLease
    overridden = {name for name in vars(cls) if not name.startswith("__")} - {"description"}
    assert overridden == differs


def test_the_one_difference_of_each_variant() -> None:
    assert GoldenLease("", "w", "job", 2.0).fence(7) == 7
    assert variants.NoFencing("", "w", "job", 2.0).fence(7) is None
    assert " AND holder = %(me)s" in GoldenLease.renew_sql
    assert variants.RenewWithoutOwnerCheck.renew_sql == GoldenLease.renew_sql.replace(
        " AND holder = %(me)s", ""
    )
    assert GoldenLease("", "w", "job", 2.0).now_params() == {}
    assert set(variants.WallClockExpiry("", "w", "job", 2.0).now_params()) == {"now"}


def test_every_variant_has_a_fault_space_and_the_golden_one_holds_every_exposing_kind() -> None:
    kinds = {}
    for variant in LEASES.variants:
        space = LEASES.fault_space(variant)
        kinds[variant] = {t.kind for t in space.templates}
        assert generate(space, 1).events  # every space draws at least one fault
    assert kinds["no-fencing"] == {FaultKind.PAUSE}
    assert kinds["wall-clock-expiry"] == {FaultKind.CLOCK_SKEW}
    assert kinds["renew-without-owner-check"] == {FaultKind.PARTITION}
    assert (
        kinds["no-fencing"] | kinds["wall-clock-expiry"] | kinds["renew-without-owner-check"]
        <= kinds["golden"]
    )


def test_the_task_names_its_files_and_the_interface_documents_every_variable() -> None:
    task = LEASES.task
    assert task is not None
    interface = (LEASES.path / task.interface).read_text()
    assert (LEASES.path / task.starter).is_file()
    for name in task.env:
        assert f"`{name}`" in interface
