"""The tenants pack for real: PostgreSQL, the API process, proxies, the harness's client.

Per defective variant, on a seed of its own fault space: the variant holds with no fault at
all (a smoke test is not a variant); that seed's schedule violates the invariant it
declares, with every diagnosis signal it declares in the trace; and the golden API holds
under that very schedule, its trace lacking the signals that name the defect. Plus the
golden through the abandon and replay paths on a seed of the neutral space. Ten runs of
about 3 s each (the golden seed about 8 s): about 40 s in all.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from chaos.run import RunOptions, RunResult, run_scenario
from chaos.scenario import load_scenario
from chaos.services import PostgresReader, create_reader, default_run_parent, open_postgres
from chaos.workload import WORKLOAD
from faults.model import FaultSchedule
from faults.schedule import generate
from ground.errors import Unreadable
from scenarios.tenants.scenario import _catalog, _items

pytestmark = pytest.mark.slow

#: A seed of each variant's own space that catches it (measured: `chaos sweep tenants
#: --variant V --seeds 0-19` caught every variant on all 20 seeds).
CAUGHT_ON = {"session-tenant": 1, "missing-policy": 1, "definer-function": 2}


async def run(variant: str, schedule: FaultSchedule, out: Path) -> RunResult:
    scenario = load_scenario("tenants")
    return await run_scenario(
        RunOptions(scenario, schedule.seed, variant=variant, schedule=schedule, out=out)
    )


def verdicts(result: RunResult) -> dict[str, object]:
    return {v.name: v.valid for v in result.verdicts}


async def test_golden_holds_through_an_abandoned_transaction_and_an_in_doubt_commit(
    tmp_path: Path,
) -> None:
    """Seed 11 of the neutral space: a 1.55 s stall on the database link (the API abandons
    a transaction after 1 s and retries it elsewhere), then a reset that loses the answer to
    globex's committed k-5 (the retry replays the stored response)."""
    tenants = load_scenario("tenants")
    schedule = generate(tenants.fault_space("golden"), 11)
    result = await run("golden", schedule, tmp_path / "golden.trace")
    assert result.held, [v.explanation for v in result.verdicts]
    assert result.settled
    logs = [str(e["value"]) for e in result.history if e["process"] == "service:api"]
    assert any("(no answer within 1 s); retrying" in line for line in logs)
    assert any("idempotency: replayed key k-5 for tenant globex" in line for line in logs)
    creates = [e for e in result.history if e["process"] == "client" and e["f"] == "create"]
    assert [e["type"] for e in creates] == ["invoke", "ok"] * 15


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_variant_holds_without_faults(variant: str, tmp_path: Path) -> None:
    result = await run(variant, FaultSchedule(seed=0, space_hash="none"), tmp_path / "t.trace")
    # the pack's invariants and the run's own workload verdict (chaos.workload)
    expected = dict.fromkeys((*load_scenario("tenants").invariants, WORKLOAD), True)
    assert verdicts(result) == expected
    assert result.settled


@pytest.mark.parametrize("variant", sorted(CAUGHT_ON))
async def test_variant_is_caught_and_the_golden_survives_the_same_faults(
    variant: str, tmp_path: Path
) -> None:
    tenants = load_scenario("tenants")
    schedule = generate(tenants.fault_space(variant), CAUGHT_ON[variant])
    caught = await run(variant, schedule, tmp_path / "variant.trace")
    declared = tenants.catches[variant]
    assert verdicts(caught)[declared] is False
    leak = next(v for v in caught.verdicts if v.name == declared)
    assert leak.evidence["leaks"], leak.explanation
    missing = [s.what for s in tenants.signals[variant] if not s.found_in(caught.history)]
    assert missing == []

    golden = await run("golden", schedule, tmp_path / "golden.trace")
    assert golden.held, [v.explanation for v in golden.verdicts]
    applied = [e for e in golden.history if e["process"] == "nemesis"]
    assert [e["value"]["phase"] for e in applied] == ["apply", "heal"]
    # the signals point at the defect: the golden's trace under the same faults lacks some
    assert not all(s.found_in(golden.history) for s in tenants.signals[variant])


@pytest.fixture
def pg_root() -> Iterator[Path]:
    """A folder PostgreSQL's own user can reach (not under pytest's private tmp_path)."""
    root = Path(tempfile.mkdtemp(prefix="tenants-read-", dir=default_run_parent()))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_the_harness_reads_app_items_as_plain_data_or_refuses(pg_root: Path) -> None:
    """The harness reads ``app.items`` as its reader: every row, row-level security
    bypassed; a table that lacks a column, or a view, is refused (``Unreadable``: the seed
    fails saying why), and the catalog still says what the schema holds."""
    async with open_postgres(pg_root) as pg:

        def reader_of_app() -> PostgresReader:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                conn.execute("CREATE SCHEMA app")
            return create_reader(pg, writers={"app": [pg.user]}, lock_timeout_s=2)

        reader = await trio.to_thread.run_sync(reader_of_app)

        def read(ddl: str) -> tuple[Any, dict[str, Any]]:
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                found = conn.execute(
                    "SELECT relkind FROM pg_class WHERE oid = to_regclass('app.items')"
                ).fetchone()
                if found is not None:
                    conn.execute(f"DROP {'VIEW' if found[0] == 'v' else 'TABLE'} app.items")
                conn.execute(ddl)
            try:
                items: Any = _items(reader)
            except Unreadable as exc:
                items = f"unreadable: {exc}"
            return items, _catalog(pg.dsn)

        try:
            off, _ = await trio.to_thread.run_sync(
                read, "CREATE TABLE app.items (id text, body text)"
            )
            assert off == "unreadable: app.items has no column 'tenant_id'"
            view, catalog = await trio.to_thread.run_sync(
                read, "CREATE VIEW app.items AS SELECT 'it-1' AS id, 'x' AS tenant_id, 'y' AS body"
            )
            assert view == "unreadable: app.items: a view, not an ordinary table"
            assert catalog["items_table"] == "not a table"
            good, catalog = await trio.to_thread.run_sync(
                read,
                "CREATE TABLE app.items (id text, tenant_id text, body text);"
                "INSERT INTO app.items VALUES ('it-1', 'acme', 'n');"
                "ALTER TABLE app.items ENABLE ROW LEVEL SECURITY;"
                "ALTER TABLE app.items FORCE ROW LEVEL SECURITY",
            )
            assert good == [{"id": "it-1", "tenant": "acme", "body": "n"}]
            assert catalog["tables"]["items"] == {"force": True, "policies": [], "rls": True}
        finally:
            reader.close()
