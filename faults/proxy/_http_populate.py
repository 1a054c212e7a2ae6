"""``POST /populate``: validate every entry first, then create or replace proxies in order.

An entry whose name exists with the same listen and upstream is left alone (toxics and
enabled kept); one whose listen or upstream differ is replaced (its toxics are lost).
Listen addresses are compared as resolved (``localhost:7070`` is ``127.0.0.1:7070``), as
the reference does. The
first failure stops the run; the entries applied before it stay. The answer always carries
a ``proxies`` array (``[]``, never null: the Node client crashes on null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faults.proxy._address import same_listen
from faults.proxy._http_body import DEFAULT_LISTEN, fields, flag, kind, parse_json, text
from faults.proxy.errors import BadRequest, ProxyAPIError
from faults.proxy.proxy import Proxy
from faults.proxy.server import ProxyServer

_FIELDS = ("name", "listen", "upstream", "enabled")


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    listen: str
    upstream: str
    enabled: bool


def populate(server: ProxyServer, body: bytes) -> tuple[int, dict[str, Any]]:
    """The status and JSON answer of a populate request with ``body``."""
    try:
        entries = _validate(parse_json(body))
    except ProxyAPIError as exc:
        return exc.status, {**exc.to_json(), "proxies": []}
    applied: list[dict[str, Any]] = []
    for entry in entries:
        try:
            proxy = _apply(server, entry)
        except ProxyAPIError as exc:
            return exc.status, {**exc.to_json(), "proxies": applied}
        applied.append(proxy.to_json())
    return 201, {"proxies": applied}


def _validate(data: Any) -> list[_Entry]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise BadRequest(f"bad request body: expected a JSON array of proxies, got {kind(data)}")
    entries = []
    for index, raw in enumerate(data, start=1):
        where = f" at proxy {index}"
        found = fields(raw, _FIELDS, where)
        name, listen = text(found, "name", where), text(found, "listen", where)
        upstream, enabled = text(found, "upstream", where), flag(found, "enabled", where)
        if not name:
            raise BadRequest(f"missing required field: name{where}")
        if not upstream:
            raise BadRequest(f"missing required field: upstream{where}")
        try:
            Proxy.check_upstream(upstream)
        except BadRequest as exc:
            raise BadRequest(f"{exc.message}{where}") from None
        entries.append(_Entry(name, listen or DEFAULT_LISTEN, upstream, enabled is not False))
    return entries


def _apply(server: ProxyServer, entry: _Entry) -> Proxy:
    existing = server.proxies.get(entry.name)
    if existing is not None:
        if same_listen(existing.listen, entry.listen) and existing.upstream == entry.upstream:
            return existing
        server.delete_proxy(entry.name)
    return server.create_proxy(entry.name, entry.listen, entry.upstream, enabled=entry.enabled)
