"""The payment gateway checks what its client (the consumer under test) sends, and keeps the
charges it executed: the external side effect the checkers trust."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scenarios.payments import gateway
from scenarios.payments.gateway import BadCharge, Ledger, parse_charge

GOOD = {"order_id": "o-001", "amount_cents": 1234, "idempotency_key": "o-001"}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({**GOOD, "order_id": {"$ne": None}}, "order_id must be a string"),
        ({**GOOD, "order_id": ["o-001"]}, "order_id must be a string"),
        ({**GOOD, "order_id": 1}, "order_id must be a string"),
        ({**GOOD, "order_id": ""}, "order_id must be a string"),
        ({**GOOD, "order_id": "o" * 201}, "order_id must be a string"),
        ({**GOOD, "amount_cents": "1234"}, "amount_cents must be an integer"),
        ({**GOOD, "amount_cents": 12.5}, "amount_cents must be an integer"),
        ({**GOOD, "amount_cents": True}, "amount_cents must be an integer"),
        ({**GOOD, "amount_cents": 0}, "amount_cents must be an integer"),
        ({**GOOD, "amount_cents": -5}, "amount_cents must be an integer"),
        ({**GOOD, "amount_cents": 10**30}, "amount_cents must be an integer"),
        ({**GOOD, "idempotency_key": 7}, "idempotency_key must be null"),
        ({**GOOD, "idempotency_key": {"k": 1}}, "idempotency_key must be null"),
        ({**GOOD, "refund": True}, "unknown field(s): refund"),
        ({"order_id": "o-001"}, "amount_cents must be an integer"),
        ([GOOD], "must be a JSON object"),
        ("o-001", "must be a JSON object"),
    ],
)
def test_a_charge_off_the_contract_is_refused(body: Any, why: str) -> None:
    with pytest.raises(BadCharge, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_charge(json.dumps(body).encode())


def test_a_charge_on_the_contract_parses() -> None:
    assert parse_charge(json.dumps(GOOD).encode()) == ("o-001", 1234, "o-001")
    no_key = {k: v for k, v in GOOD.items() if k != "idempotency_key"}
    assert parse_charge(json.dumps(no_key).encode()) == ("o-001", 1234, None)
    with pytest.raises(BadCharge, match="not JSON"):
        parse_charge(b"[" * 100_000)


def test_the_ledger_caps_charges_and_reads_its_journal_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "gateway.jsonl"
    monkeypatch.setattr(gateway, "MAX_CHARGES", 3)
    ledger = Ledger(journal)
    for i in range(3):
        ledger.charge(f"o-{i}", 100, f"o-{i}")
    assert ledger.charge("o-0", 100, "o-0")[1] is True  # replayed, not a new charge
    with pytest.raises(OverflowError):
        ledger.charge("o-9", 100, None)
    with journal.open("a") as f:
        f.write('{"charge_id": "ch-4", "order_')  # a line cut by a kill
    ledger.close()
    again = Ledger(journal)
    assert [c["order_id"] for c in again.charges] == ["o-0", "o-1", "o-2"]
    assert again.charge("o-1", 100, "o-1")[1] is True
    monkeypatch.setattr(gateway, "MAX_CHARGES", 4)
    again.charge("o-3", 100, None)
    again.close()
    last = Ledger(journal)
    assert [c["order_id"] for c in last.charges] == ["o-0", "o-1", "o-2", "o-3"]
    last.close()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port_file, journal = tmp_path / "port", tmp_path / "gateway.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "scenarios.payments.gateway", "0", str(journal), str(port_file)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "gateway listening" in process.stdout.readline()
        yield f"http://127.0.0.1:{port_file.read_text()}", journal
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stdout is not None
        process.stdout.close()


def _request(url: str, method: str, body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_the_running_gateway_refuses_abuse_and_charges_nothing(
    running: tuple[str, Path],
) -> None:
    url, _ = running
    bad = json.dumps({**GOOD, "order_id": {}}).encode()
    assert _request(f"{url}/charge", "POST", bad)[0] == 400
    assert _request(f"{url}/charge", "POST", b"x" * (gateway.MAX_BODY + 1))[0] == 413
    assert _request(f"{url}/charges", "DELETE")[0] == 405
    assert _request(f"{url}/reset", "POST", b"{}")[0] == 404
    assert _request(f"{url}/charges", "POST", json.dumps(GOOD).encode())[0] == 404
    assert _request(f"{url}/charges", "GET") == (200, [])
    status, charged = _request(f"{url}/charge", "POST", json.dumps(GOOD).encode())
    assert (status, charged["order_id"], charged["replayed"]) == (200, "o-001", False)
    assert len(_request(f"{url}/charges", "GET")[1]) == 1


def test_a_restarted_gateway_keeps_what_it_charged(tmp_path: Path) -> None:
    journal = tmp_path / "gateway.jsonl"
    for attempt in range(2):
        port_file = tmp_path / f"port{attempt}"
        process = subprocess.Popen(
            [sys.executable, "-m", "scenarios.payments.gateway", "0", str(journal),
             str(port_file)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            process.stdout.readline()
            url = f"http://127.0.0.1:{port_file.read_text()}"
            status, charged = _request(f"{url}/charge", "POST", json.dumps(GOOD).encode())
            assert status == 200
            assert charged["replayed"] is (attempt == 1)
            assert len(_request(f"{url}/charges", "GET")[1]) == 1
        finally:
            process.kill()
            process.wait(timeout=10)
            assert process.stdout is not None
            process.stdout.close()
