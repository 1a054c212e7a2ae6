"""The tenants pack without services: what it declares, its fault spaces against its own
workload, each variant's one difference from the golden API, the starter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from psycopg import sql

import invariants
from chaos.scenario import load_scenario
from chaos.services import free_port
from faults.kinds import FaultKind
from faults.schedule import generate
from faults.triggers import OnConnection
from scenarios.tenants import api
from scenarios.tenants.scenario import TENANTS, plan
from scenarios.tenants.variants import (
    VARIANTS,
    DefinerFunctionApi,
    MissingPolicyApi,
    SessionTenantApi,
    api_for,
)

PACK_DIR = Path(__file__).resolve().parents[3] / "scenarios" / "tenants"
NAMES = ["tenant_isolation", "no_cross_tenant_writes", "read_your_writes"]


class FixedRng:
    def getrandbits(self, bits: int) -> int:
        return 0


def test_the_pack_declares_its_checkers_variants_catches_signals_and_task() -> None:
    tenants = load_scenario("tenants")
    assert [c.name for c in tenants.checkers()] == NAMES
    assert set(NAMES) <= set(invariants.REGISTRY["tenants"])
    assert list(tenants.variants) == list(VARIANTS)
    assert tenants.variants["missing-policy"] == MissingPolicyApi.description
    assert api_for("definer-function") is DefinerFunctionApi
    defective = [v for v in tenants.variants if v != "golden"]
    assert tenants.catches == dict.fromkeys(defective, "tenant_isolation")
    assert sorted(tenants.signals) == sorted(defective)
    assert all(len(tenants.signals[v]) >= 3 for v in defective)
    task = tenants.task
    assert task is not None
    assert task.service == "api"
    assert set(task.env) == {"PORT", "DATABASE_URL", "OWNER_DATABASE_URL", "APP_ROLE"}
    assert (PACK_DIR / task.interface).is_file()
    assert (PACK_DIR / task.starter).is_file()


def test_every_variant_has_a_fault_space() -> None:
    tenants = load_scenario("tenants")
    for variant in tenants.variants:
        assert generate(tenants.fault_space(variant), 0).events


def connections(variant: str, link: str = "client-api") -> set[int]:
    """Every client-api connection number an on_connection trigger of the space may pick."""
    space = load_scenario("tenants").fault_space(variant)
    out: set[int] = set()
    for template in space.templates:
        for trigger in template.triggers:
            if trigger.type != "on_connection":
                continue
            if link in (trigger.links or space.targets_of(template)):
                out |= set(range(trigger.n.lo, trigger.n.hi + 1))
    return out


@pytest.mark.parametrize("variant", ["missing-policy", "definer-function"])
def test_the_replay_variants_are_hit_on_creates_of_a_tenant_that_is_not_first(
    variant: str,
) -> None:
    """Their leak needs a create retried after it committed whose key an earlier tenant
    already used: a create of the second or third tenant, from the second round on."""
    steps = plan(FixedRng())  # type: ignore[arg-type]
    hit = connections(variant)
    assert hit
    for n in hit:
        step = steps[n - 1]
        assert (step.f, step.key != "k-1") == ("create", True), n
        assert step.tenant != TENANTS[0], n


def test_the_session_variant_is_hit_after_every_pooled_connection_served_a_tenant() -> None:
    first_round = 2 * len(TENANTS)
    assert api.POOL_SIZE <= first_round
    hit = connections("session-tenant")
    assert hit
    assert min(hit) > first_round
    assert max(hit) <= len(plan(FixedRng()))  # type: ignore[arg-type]


def test_the_session_variants_reset_heals_before_the_apis_retry() -> None:
    space = load_scenario("tenants").fault_space("session-tenant")
    resets = [t for t in space.templates if t.kind == FaultKind.RESET_PEER]
    assert resets
    for template in resets:
        assert template.duration_s is not None
        assert template.duration_s.hi <= api.BACKOFF_S[0] / 2


def test_the_neutral_space_reaches_every_variants_exposing_fault() -> None:
    """Search starts from the golden space: it must hold the fault (kind, link, trigger
    numbers) that exposes each variant."""
    golden = load_scenario("tenants").fault_space("golden")
    resets = [
        t
        for t in golden.templates
        if t.kind == FaultKind.RESET_PEER and "api-postgres" in golden.targets_of(t)
    ]
    assert resets
    reachable = connections("golden")
    for variant in ("session-tenant", "missing-policy", "definer-function"):
        assert connections(variant) <= reachable, variant
    schedules = [generate(golden, seed) for seed in range(40)]
    assert any(
        e.kind == FaultKind.RESET_PEER
        and e.target.name == "api-postgres"
        and isinstance(e.trigger, OnConnection)
        and e.trigger.n in connections("missing-policy")
        for s in schedules
        for e in s.events
    )


def render(statements: list[sql.Composable]) -> list[str]:
    return [s.as_string() for s in statements]


def test_the_golden_api_sets_the_tenant_in_every_transaction() -> None:
    golden = api.TenantsApi("dsn", "owner", "app")
    session = api.Session(golden, "acme")
    first = render(golden.tenant_statements(session))
    session.transactions_sent = 3  # a retry
    assert render(golden.tenant_statements(session)) == first
    assert first == ["SELECT set_config('app.tenant', 'acme', true)"]


def test_the_session_variant_sets_the_tenant_once_per_session_with_set() -> None:
    variant = SessionTenantApi("dsn", "owner", "app")
    session = api.Session(variant, "globex")
    assert render(variant.tenant_statements(session)) == ["SET app.tenant = 'globex'"]
    session.transactions_sent = 1
    assert variant.tenant_statements(session) == []


def test_each_migration_variant_differs_from_the_golden_in_one_place() -> None:
    golden = api.MIGRATION.splitlines()
    missing = MissingPolicyApi.migration.splitlines()
    removed = [line for line in golden if line not in missing]
    assert removed == [
        "-- requests policy",
        "ALTER TABLE app.requests ENABLE ROW LEVEL SECURITY;",
        "DROP POLICY IF EXISTS requests_tenant ON app.requests;",
        "CREATE POLICY requests_tenant ON app.requests",
        "-- end requests policy",
    ]
    assert all(line in golden for line in missing)
    definer = DefinerFunctionApi.migration.splitlines()
    changed = [(a, b) for a, b in zip(golden, definer, strict=True) if a != b]
    assert changed == [
        (
            "LANGUAGE plpgsql SECURITY INVOKER AS $$",
            "LANGUAGE plpgsql SECURITY DEFINER AS $$",
        )
    ]


def test_the_starter_runs_and_answers_501() -> None:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "DATABASE_URL": "unused",
        "OWNER_DATABASE_URL": "unused",
        "APP_ROLE": "unused",
    }
    with subprocess.Popen(
        [sys.executable, str(PACK_DIR / "starter.py")], env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert "api ready" in proc.stdout.readline()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/items", headers={"X-Tenant": "acme"}
            )
            with pytest.raises(urllib.error.HTTPError) as raised:
                urllib.request.urlopen(request, timeout=5)
            assert raised.value.code == 501
            assert json.loads(raised.value.read()) == {"error": "not implemented"}
        finally:
            proc.terminate()
