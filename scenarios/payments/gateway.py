"""The payment gateway: a small HTTP service whose charges are the external side effect.

``POST /charge`` with ``{"order_id", "amount_cents", "idempotency_key"}`` executes a charge,
unless the idempotency key was seen before: then it answers with the earlier charge and
charges nothing. ``GET /charges`` lists every charge executed. Each executed charge is also
appended to the journal file, which a restarted gateway reads back: the record survives the
process.

The consumer under test is its client, so every request is checked before anything is
charged (400, nothing executed): a JSON object of exactly those fields, ``order_id`` a
non-empty string of at most 200 characters, ``amount_cents`` an integer from 1 to
``MAX_AMOUNT``, ``idempotency_key`` a string of at most 200 characters or null (or absent);
a body over ``MAX_BODY`` bytes is refused unread (413), an unknown path is 404, and past
``MAX_CHARGES`` executed charges it executes no more (429). Nothing a client sends can
change or remove a charge already executed.

Usage: python -m scenarios.payments.gateway PORT JOURNAL [PORT_FILE]   (PORT 0: any free
port, written to PORT_FILE before the ready line)
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from ground.jsonhttp import JsonHandler, serve

#: What one request may carry, and how many charges a run's gateway executes at most.
MAX_BODY = 64 * 1024
MAX_TEXT = 200
MAX_AMOUNT = 100_000_000
MAX_CHARGES = 10_000
FIELDS = {"order_id", "amount_cents", "idempotency_key"}


class BadCharge(ValueError):
    """A charge request that does not follow the contract (nothing is executed)."""


def parse_charge(raw: bytes) -> tuple[str, int, str | None]:
    """(order id, amount, idempotency key) of a ``POST /charge`` body, or BadCharge."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadCharge("the body is not JSON") from None
    if not isinstance(body, dict):
        raise BadCharge("the body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadCharge(f"unknown field(s): {', '.join(unknown)}")
    order_id, amount = body.get("order_id"), body.get("amount_cents")
    key = body.get("idempotency_key")
    if not isinstance(order_id, str) or not 0 < len(order_id) <= MAX_TEXT:
        raise BadCharge(f"order_id must be a string of 1 to {MAX_TEXT} characters")
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= MAX_AMOUNT:
        raise BadCharge(f"amount_cents must be an integer from 1 to {MAX_AMOUNT}")
    if key is not None and (not isinstance(key, str) or len(key) > MAX_TEXT):
        raise BadCharge(f"idempotency_key must be null or a string of 0 to {MAX_TEXT} characters")
    return order_id, amount, key


class Ledger:
    """Executed charges and the idempotency keys already honoured (read back from the
    journal when the gateway starts again)."""

    def __init__(self, journal: Path) -> None:
        self._lock = threading.Lock()
        self.charges: list[dict[str, Any]] = []
        self._by_key: dict[str, dict[str, Any]] = {}
        text = journal.read_text(encoding="utf-8") if journal.exists() else ""
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill mid-write: that charge never answered
            self.charges.append(record)
            if record.get("idempotency_key") is not None:
                self._by_key[record["idempotency_key"]] = record
        self._journal = journal.open("a", encoding="utf-8")
        if text and not text.endswith("\n"):
            self._journal.write("\n")  # the cut line ends here, not in the next record

    def close(self) -> None:
        self._journal.close()

    def charge(self, order_id: str, amount: int, key: str | None) -> tuple[dict[str, Any], bool]:
        with self._lock:
            if key is not None and key in self._by_key:
                return self._by_key[key], True
            if len(self.charges) >= MAX_CHARGES:
                raise OverflowError(f"this gateway executes at most {MAX_CHARGES} charges")
            record = {
                "charge_id": f"ch-{len(self.charges) + 1}",
                "order_id": order_id,
                "amount_cents": amount,
                "idempotency_key": key,
            }
            self.charges.append(record)
            if key is not None:
                self._by_key[key] = record
            self._journal.write(json.dumps(record) + "\n")
            self._journal.flush()
            return record, False


def make_handler(ledger: Ledger) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path == "/charges":
                with ledger._lock:
                    charges = list(ledger.charges)
                self.reply(200, charges)
            elif self.path == "/health":
                self.reply(200, {"ok": True})
            else:
                self.not_found()

        def do_POST(self) -> None:
            raw = self.read_body(MAX_BODY)
            if raw is None:
                return
            if self.path != "/charge":
                self.not_found()
                return
            try:
                order_id, amount, key = parse_charge(raw)
                record, replayed = ledger.charge(order_id, amount, key)
            except BadCharge as exc:
                self.reply(400, {"error": f"bad charge request: {exc}"})
                return
            except OverflowError as exc:
                self.reply(429, {"error": str(exc)})
                return
            self.reply(200, {**record, "replayed": replayed})

    return Handler


def main() -> None:
    port, journal = int(sys.argv[1]), Path(sys.argv[2])

    def listening(port: int) -> None:
        if len(sys.argv) > 3:  # PORT_FILE: where the harness reads the port
            tmp = Path(sys.argv[3] + ".tmp")
            tmp.write_text(str(port), encoding="utf-8")
            tmp.replace(sys.argv[3])
        print(f"gateway listening on 127.0.0.1:{port}", flush=True)

    serve(make_handler(Ledger(journal)), port, listening)


if __name__ == "__main__":
    main()
