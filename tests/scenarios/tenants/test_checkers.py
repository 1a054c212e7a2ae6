"""The tenants checkers on hand-written histories and final states: holding, each violation,
what counts as evidence, malformed input."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import invariants
from invariants import History, Verdict, run_checkers
from scenarios.tenants.checkers import (
    PACK,
    no_cross_tenant_writes,
    read_your_writes,
    tenant_isolation,
)

NAMES = ("tenant_isolation", "no_cross_tenant_writes", "read_your_writes")


class Ops:
    """Builds a history: requests of the harness's client and probes, and nemesis ops."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    def add(self, process: str, type_: str, f: str, value: Any) -> int:
        index = len(self.ops)
        self.ops.append(
            {
                "index": index,
                "time_ns": index * 1000,
                "process": process,
                "type": type_,
                "f": f,
                "value": value,
            }
        )
        return index

    def create(
        self, tenant: str, key: str, note: str, item: tuple[str, str] | None, outcome: str = "ok"
    ) -> int:
        asked = {"tenant": tenant, "key": key, "body": note}
        index = self.add("client", "invoke", "create", asked)
        done: dict[str, Any] = dict(asked, attempts=["201"])
        if outcome == "ok" and item is not None:
            done.update(status=201, item={"id": item[0], "body": item[1]})
        self.add("client", outcome, "create", done)
        return index

    def list(
        self, tenant: str, rows: list[tuple[str, str]], process: str = "client", outcome: str = "ok"
    ) -> int:
        index = self.add(process, "invoke", "list", {"tenant": tenant})
        done: dict[str, Any] = {"tenant": tenant, "attempts": ["200"]}
        if outcome == "ok":
            done.update(status=200, items=[{"id": i, "body": b} for i, b in rows])
        self.add(process, outcome, "list", done)
        return index

    def nemesis(self) -> None:
        self.add("nemesis", "info", "reset_peer", {"phase": "apply", "fault_id": "f0"})

    def history(self) -> History:
        return History(self.ops)


A1, A2, G1 = "acme note 1", "acme note 2", "globex note 1"


def golden_run() -> tuple[Ops, dict[str, Any]]:
    """Two tenants write, read their own notes, and are probed after recovery."""
    ops = Ops()
    ops.create("acme", "k-1", A1, ("it-1", A1))
    ops.nemesis()
    ops.create("globex", "k-1", G1, ("it-2", G1))
    ops.list("acme", [("it-1", A1)])
    ops.create("acme", "k-2", A2, ("it-3", A2))
    ops.list("globex", [("it-2", G1)])
    ops.list("acme", [("it-1", A1), ("it-3", A2)], process="probe")
    ops.list("globex", [("it-2", G1)], process="probe")
    state = {
        "tenants": ["acme", "globex"],
        "items": [
            {"id": "it-1", "tenant": "acme", "body": A1},
            {"id": "it-2", "tenant": "globex", "body": G1},
            {"id": "it-3", "tenant": "acme", "body": A2},
        ],
        "schema": {"tables": {}},
    }
    return ops, state


def check(ops: Ops, state: dict[str, Any]) -> dict[str, Verdict]:
    checkers = [tenant_isolation, no_cross_tenant_writes, read_your_writes]
    return {v.name: v for v in run_checkers(checkers, ops.history(), state)}


def test_a_run_that_keeps_tenants_apart_holds_everywhere() -> None:
    verdicts = check(*golden_run())
    assert {n: v.valid for n, v in verdicts.items()} == dict.fromkeys(NAMES, True)
    assert verdicts["tenant_isolation"].explanation == (
        "each of the 7 responses held only the asking tenant's rows."
    )
    assert verdicts["no_cross_tenant_writes"].explanation == (
        "each of the 3 stored notes is in the partition of the tenant that sent it, and every "
        "acknowledged create is stored."
    )
    assert verdicts["read_your_writes"].explanation == (
        "all 3 creates were acknowledged and each of the 4 lists held every note acknowledged "
        "to its tenant before it."
    )


def test_a_list_holding_another_tenants_rows_is_a_leak() -> None:
    ops, state = golden_run()
    leak = ops.list("globex", [("it-2", G1), ("it-1", A1), ("it-3", A2)])
    verdict = check(ops, state)["tenant_isolation"]
    assert verdict.valid is False
    assert verdict.explanation == (
        f"1 of 8 responses held another tenant's rows: op {leak} (globex list) got 2 rows of "
        "acme (it-1, it-3)."
    )
    assert verdict.evidence["leaks"] == [
        {
            "op": leak,
            "request": f"op {leak} (globex list)",
            "tenant": "globex",
            "probe": False,
            "rows": [
                {"id": "it-1", "owner": "acme", "sent_by": ["acme"]},
                {"id": "it-3", "owner": "acme", "sent_by": ["acme"]},
            ],
        }
    ]


def test_a_replayed_create_answered_with_another_tenants_note_leaks_and_nothing_else() -> None:
    """The missing-policy shape: globex's retried k-2 gets acme's stored response, while
    globex's own note was stored under globex and shows in its lists."""
    ops, state = golden_run()
    g2 = "globex note 2"
    leak = ops.create("globex", "k-2", g2, ("it-3", A2))  # acme's stored k-2 response
    state["items"].append({"id": "it-4", "tenant": "globex", "body": g2})
    ops.list("globex", [("it-2", G1), ("it-4", g2)], process="probe")
    verdicts = check(ops, state)
    assert {n: v.valid for n, v in verdicts.items()} == {
        "tenant_isolation": False,
        "no_cross_tenant_writes": True,
        "read_your_writes": True,
    }
    assert verdicts["tenant_isolation"].explanation.endswith(
        f"op {leak} (globex create k-2) got 1 row of acme (it-3)."
    )


def test_a_note_stored_under_the_wrong_tenant_is_a_cross_tenant_write_and_leaks_on_read() -> None:
    """The session-tenant shape: globex's create ran under acme's session setting."""
    ops, state = golden_run()
    g2 = "globex note 2"
    ops.create("globex", "k-2", g2, ("it-4", g2))
    state["items"].append({"id": "it-4", "tenant": "acme", "body": g2})
    read = ops.list("acme", [("it-1", A1), ("it-3", A2), ("it-4", g2)])
    verdicts = check(ops, state)
    isolation = verdicts["tenant_isolation"]
    assert isolation.valid is False
    # globex's create got a row acme owns; acme's list got a note only globex sent.
    assert [leak["tenant"] for leak in isolation.evidence["leaks"]] == ["globex", "acme"]
    assert f"op {read} (acme list) got 1 row of globex (it-4)" in isolation.explanation
    writes = verdicts["no_cross_tenant_writes"]
    assert writes.valid is False
    assert writes.evidence["misplaced"] == {"it-4": {"owner": "acme", "sent_by": ["globex"]}}
    assert writes.explanation.startswith(
        "1 row was written into another tenant's partition: it-4 (owner acme, sent by globex);"
        " 1 acknowledged create is not stored under its tenant: op "
    )


def test_leaks_seen_by_the_recovery_probes_are_counted_apart() -> None:
    """A defect that never recovers fails every probe: the sentence says how many of the
    leaking responses were probes, so the workload's count stays readable."""
    ops, state = golden_run()
    ops.list("globex", [("it-2", G1), ("it-1", A1)])
    ops.list("globex", [("it-2", G1), ("it-1", A1)], process="probe")
    ops.list("globex", [("it-2", G1), ("it-1", A1)], process="probe")
    verdicts = check(ops, state)
    assert verdicts["tenant_isolation"].explanation.startswith(
        "3 of 10 responses (2 of them recovery probes) held another tenant's rows: "
    )
    assert [leak["probe"] for leak in verdicts["tenant_isolation"].evidence["leaks"]] == [
        False,
        True,
        True,
    ]
    assert verdicts["read_your_writes"].valid is True  # globex's own note is there


def test_a_row_in_no_table_and_a_row_nobody_sent_are_violations() -> None:
    ops, state = golden_run()
    ops.list("acme", [("it-1", A1), ("it-99", "made up")])
    state["items"].append({"id": "it-5", "tenant": "acme", "body": "from nowhere"})
    verdicts = check(ops, state)
    assert verdicts["tenant_isolation"].valid is False
    assert verdicts["tenant_isolation"].explanation == "1 row in responses is in no table: it-99."
    assert verdicts["no_cross_tenant_writes"].valid is False
    assert verdicts["no_cross_tenant_writes"].evidence["unasked"] == ["it-5"]


def test_only_successful_responses_are_evidence() -> None:
    """A request that failed or is unknown carries no rows: nothing to leak."""
    ops, state = golden_run()
    ops.list("globex", [("it-1", A1)], outcome="info")
    ops.list("globex", [("it-1", A1)], outcome="fail")
    assert check(ops, state)["tenant_isolation"].valid is True


def test_acknowledged_notes_must_be_stored_and_listed_afterwards() -> None:
    ops, state = golden_run()
    state["items"] = [row for row in state["items"] if row["id"] != "it-3"]  # lost
    verdicts = check(ops, state)
    writes = verdicts["no_cross_tenant_writes"]
    assert writes.valid is False
    assert [m["request"] for m in writes.evidence["acknowledged_missing"]] == [
        "op 7 (acme create k-2)"
    ]


def test_a_list_must_hold_what_was_acknowledged_before_it_not_after() -> None:
    ops = Ops()
    ops.create("acme", "k-1", A1, ("it-1", A1))
    ops.add("client", "invoke", "list", {"tenant": "acme"})
    ops.add("client", "invoke", "create", {"tenant": "acme", "key": "k-2", "body": A2})
    ops.ops[-1]["process"] = "client-2"  # a second client, concurrent with the list
    ops.add(
        "client-2",
        "ok",
        "create",
        {"tenant": "acme", "key": "k-2", "body": A2, "item": {"id": "it-2", "body": A2}},
    )
    ops.add("client", "ok", "list", {"tenant": "acme", "items": [{"id": "it-1", "body": A1}]})
    ops.list("acme", [("it-1", A1)], process="probe")
    state = {
        "tenants": ["acme"],
        "items": [
            {"id": "it-1", "tenant": "acme", "body": A1},
            {"id": "it-2", "tenant": "acme", "body": A2},
        ],
    }
    reads = check(ops, state)["read_your_writes"]
    # the list began before k-2 was acknowledged: not owed; the probe after it is
    assert reads.valid is False
    assert [s["request"] for s in reads.evidence["short_lists"]] == ["op 6 (acme list)"]
    assert reads.evidence["short_lists"][0]["missing"] == [A2]
    assert reads.explanation == (
        "1 of 2 lists (1 of them recovery probes) lacked notes acknowledged before them: "
        "op 6 (acme list) lacked 1 note."
    )


def test_unacknowledged_creates_and_unserved_tenants_violate_read_your_writes() -> None:
    ops, state = golden_run()
    lost = ops.create("globex", "k-2", "globex note 2", None, outcome="info")
    state["tenants"].append("initech")
    reads = check(ops, state)["read_your_writes"]
    assert reads.valid is False
    assert reads.explanation == (
        f"1 create was never acknowledged: op {lost} (globex create k-2); after the faults "
        "healed, no list was served to initech."
    )


def test_the_starter_holds_isolation_and_fails_read_your_writes() -> None:
    ops = Ops()
    ops.create("acme", "k-1", A1, None, outcome="fail")
    ops.list("acme", [], process="probe", outcome="info")
    state = {"tenants": ["acme"], "items": []}
    verdicts = check(ops, state)
    assert [verdicts[n].valid for n in NAMES] == [True, True, False]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("items"), "final_state has no 'items'"),
        (lambda s: s["items"][1].pop("tenant"), "final_state['items'][1] has no string 'tenant'"),
        (lambda s: s.update(tenants="acme"), "final_state['tenants'] must be a list"),
    ],
)
def test_a_malformed_final_state_is_unknown_not_a_crash(mutate: Any, message: str) -> None:
    ops, state = golden_run()
    state = copy.deepcopy(state)
    mutate(state)
    verdicts = check(ops, state).values()
    unknown = [v for v in verdicts if v.valid == "unknown"]
    assert unknown
    assert all(message in v.explanation for v in unknown)
    assert all(v.explanation.startswith("checker crashed: MalformedState: ") for v in unknown)


def test_the_checkers_are_the_packs_own() -> None:
    assert set(NAMES) <= set(invariants.REGISTRY[PACK])
    assert not set(NAMES) & set(invariants.REGISTRY[None])


def test_a_list_of_the_workload_refused_or_never_answered_fails_read_your_writes() -> None:
    """A refused list is checked for nothing: refusing every list while the database is
    flaky hid what the lists got wrong (``tests/grading/adversaries/tenants_refuse_lists.py``
    scored 1.0). A probe that fails is only a probe: settle asks again."""
    ops, state = golden_run()
    ops.list("globex", [], outcome="fail")  # 501: final
    ops.list("acme", [], outcome="info")  # no answer after the client's attempts
    ops.list("acme", [], process="probe", outcome="fail")
    verdict = check(ops, state)["read_your_writes"]
    assert verdict.valid is False
    assert "2 lists of the workload were never served: op 15 (globex list), op 17 (acme list)" in (
        verdict.explanation
    )
    assert verdict.evidence["unserved_lists"] == ["op 15 (globex list)", "op 17 (acme list)"]
