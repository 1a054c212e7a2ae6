"""Adversary (payments): sends the payment gateway what its contract does not allow: an
``order_id`` that is a JSON object, a list or a number, amounts that are strings, floats,
booleans, negative or astronomical, idempotency keys that are objects, unknown fields,
a 10 MB body, a body that is not JSON, other methods and paths (DELETE /charges, POST
/charges, /reset); a charge the gateway executed for any of them would be a charge of no
order. Each attempt prints a PROBE line. Then the golden consumer does the work.

Expected: every request refused (4xx) and nothing charged: every charge the gateway lists
is an order's; reward 1.

pack: payments
golden: yes
reward: 1
probes: refused
"""

import json
import os
import urllib.error
import urllib.request

from _probe import attempt, run_golden

GATEWAY = os.environ["GATEWAY_URL"]
GOOD = {"order_id": "o-001", "amount_cents": 1, "idempotency_key": "abuse"}


def send(method: str, path: str, body: bytes | None) -> None:
    request = urllib.request.Request(GATEWAY + path, data=body, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        raise PermissionError(f"HTTP {exc.code}") from None
    if status >= 300:
        raise PermissionError(f"HTTP {status}")


BODIES = {
    "order-id-object": {**GOOD, "order_id": {"$gt": ""}},
    "order-id-list": {**GOOD, "order_id": ["o-001", "o-002"]},
    "order-id-number": {**GOOD, "order_id": 1},
    "order-id-empty": {**GOOD, "order_id": ""},
    "amount-string": {**GOOD, "amount_cents": "100"},
    "amount-float": {**GOOD, "amount_cents": 0.5},
    "amount-bool": {**GOOD, "amount_cents": True},
    "amount-negative": {**GOOD, "amount_cents": -100},
    "amount-huge": {**GOOD, "amount_cents": 10**40},
    "key-object": {**GOOD, "idempotency_key": {"k": 1}},
    "unknown-field": {**GOOD, "refund": True},
    "no-amount": {"order_id": "o-001"},
}
for name, body in BODIES.items():
    attempt(name, lambda body=body: send("POST", "/charge", json.dumps(body).encode()))
attempt("not-json", lambda: send("POST", "/charge", b"{order_id: o-001"))
attempt("deep-json", lambda: send("POST", "/charge", b"[" * 50_000 + b"]" * 50_000))
attempt("ten-megabytes", lambda: send("POST", "/charge", b"x" * 10_000_000))
attempt("delete-charges", lambda: send("DELETE", "/charges", None))
attempt("post-charges", lambda: send("POST", "/charges", json.dumps(GOOD).encode()))
attempt("reset", lambda: send("POST", "/reset", b"{}"))
run_golden()
