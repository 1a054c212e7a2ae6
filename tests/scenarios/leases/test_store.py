"""The leases store, a real process: a worker's flood of writes is refused past its rate
(429, no decision, no op: the history stays the size of the job), and a token or seq past a
64-bit integer is malformed (400; a trace cannot hold such a number:
``tests/grading/adversaries/leases_huge_token.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.services import free_port
from scenarios.leases.store import READY_LINE, WRITE_BURST

ROOT = Path(__file__).resolve().parents[3]
KEY = "k" * 32


@pytest.fixture
def store() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "scenarios.leases.store", str(port)],
        env={"STORE_KEYS": json.dumps({KEY: "worker-1"}), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert process.stdout is not None
    assert READY_LINE in process.stdout.readline()
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def post(url: str, body: object) -> int:
    request = urllib.request.Request(url + "/write", data=json.dumps(body).encode())
    request.add_header("Authorization", f"Bearer {KEY}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def get(url: str, path: str) -> object:
    with urllib.request.urlopen(url + path, timeout=10) as response:
        return json.loads(response.read())


def test_a_flood_of_writes_is_refused_past_the_rate_and_never_recorded(
    store: tuple[str, subprocess.Popen[str]],
) -> None:
    url, _ = store
    statuses = []
    while 429 not in statuses and len(statuses) < 5000:  # faster than 20 a second
        statuses.append(post(url, {"token": None, "seq": len(statuses)}))
    assert statuses[-1] == 429
    assert statuses.count(200) >= WRITE_BURST
    accepted = statuses.count(200)
    assert get(url, "/stats") == {"decisions": accepted}
    assert len(get(url, "/log")) == accepted  # type: ignore[arg-type]


def test_the_rate_is_a_bucket_per_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios.leases import store as module

    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    store = module.Store({"a": "worker-1", "b": "worker-2"})
    assert all(store.allow("worker-1") for _ in range(int(WRITE_BURST)))
    assert not store.allow("worker-1")
    assert store.allow("worker-2")  # another key's bucket is its own
    now[0] += 1.0  # a second: WRITES_PER_S more
    assert sum(store.allow("worker-1") for _ in range(100)) == int(module.WRITES_PER_S)


@pytest.mark.parametrize("body", [{"token": 2**63, "seq": 1}, {"token": 1, "seq": -(2**63) - 1}])
def test_a_number_past_64_bits_is_malformed(
    store: tuple[str, subprocess.Popen[str]], body: dict[str, int]
) -> None:
    url, _ = store
    assert post(url, body) == 400
    assert post(url, {"token": 2**63 - 1, "seq": -(2**63)}) == 200
    assert get(url, "/stats") == {"decisions": 1}


def test_the_auditor_reports_no_more_facts_than_the_reader_reads_rows() -> None:
    """Past the reader's row cap the audit is unreadable anyway (the seed fails): the auditor
    stops there, so a worker's UPDATE loop cannot fill the harness's memory with facts."""
    from chaos.services.reader import MAX_ROWS
    from scenarios.leases.auditor import MAX_FACTS, Auditor

    assert MAX_FACTS == MAX_ROWS
    auditor = Auditor({})
    auditor.reported = MAX_FACTS
    auditor.report({"id": 1, "kind": "grant", "token": 1, "actor": "w", "at": 0.0, "until": 2.0})
    assert auditor.last_id == 0
