"""The Toxiproxy v2 endpoints: a route table and one small function per endpoint.

Each endpoint is synchronous (the engine binds and validates at once), so a request is
handled atomically with respect to every other request. Engine errors
(``ProxyAPIError``) become the Toxiproxy error body with their status.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from urllib.parse import unquote

from faults.proxy._http_body import DEFAULT_LISTEN, fields, flag, number, parse_json, text
from faults.proxy._http_populate import populate
from faults.proxy._http_wire import HttpRequest, HttpResponse, json_response
from faults.proxy.errors import BadRequest, ProxyAPIError
from faults.proxy.server import ProxyServer

#: The reference version whose API this speaks, with ours as semver build metadata.
TOXIPROXY_VERSION = "2.12.0"

_TEXT = "text/plain; charset=utf-8"
_NOT_FOUND = HttpResponse(404, b"404 page not found\n", _TEXT)
_FORBIDDEN = HttpResponse(403, b"User agent not allowed\n", _TEXT)
_NOT_ALLOWED = HttpResponse(405)
_PROXY_FIELDS = ("name", "listen", "upstream", "enabled")
_TOXIC_FIELDS = ("name", "type", "stream", "toxicity", "attributes")

Endpoint = Callable[..., HttpResponse]


def handle(server: ProxyServer, request: HttpRequest) -> HttpResponse:
    """Answer one request: 403 for browsers, 404/405 for unknown routes, else the endpoint."""
    agent = request.header("user-agent")
    if agent is not None and agent.startswith("Mozilla/"):
        return _FORBIDDEN
    route = _match(request.target)
    if route is None:
        return _NOT_FOUND
    methods, params = route
    endpoint = methods.get(request.method)
    if endpoint is None:
        return _NOT_ALLOWED
    try:
        return endpoint(server, request.body, *params)
    except ProxyAPIError as exc:
        return json_response(exc.status, exc.to_json())


def version() -> str:
    """``2.12.0+chaos-harness.<our version>``: compares equal to 2.12.0 under semver."""
    try:
        ours = metadata.version("chaos-harness")
    except metadata.PackageNotFoundError:
        ours = "unknown"
    return f"{TOXIPROXY_VERSION}+chaos-harness.{ours}"


# -- proxies -------------------------------------------------------------------------


def _list_proxies(server: ProxyServer, body: bytes) -> HttpResponse:
    proxies = {name: server.proxies[name].to_json() for name in sorted(server.proxies)}
    return json_response(200, proxies)


def _create_proxy(server: ProxyServer, body: bytes) -> HttpResponse:
    found = fields(parse_json(body), _PROXY_FIELDS)
    name, listen = text(found, "name"), text(found, "listen")
    upstream, enabled = text(found, "upstream"), flag(found, "enabled")
    if not name:
        raise BadRequest("missing required field: name")
    if not upstream:
        raise BadRequest("missing required field: upstream")
    proxy = server.create_proxy(
        name, listen or DEFAULT_LISTEN, upstream, enabled=enabled is not False
    )
    return json_response(201, proxy.to_json())


def _get_proxy(server: ProxyServer, body: bytes, name: str) -> HttpResponse:
    return json_response(200, server.get_proxy(name).to_json())


def _update_proxy(server: ProxyServer, body: bytes, name: str) -> HttpResponse:
    server.get_proxy(name)
    found = fields(parse_json(body), _PROXY_FIELDS)
    listen, upstream = text(found, "listen"), text(found, "upstream")
    proxy = server.update_proxy(
        name, listen=listen, upstream=upstream, enabled=flag(found, "enabled")
    )
    return json_response(200, proxy.to_json())


def _delete_proxy(server: ProxyServer, body: bytes, name: str) -> HttpResponse:
    server.delete_proxy(name)
    return HttpResponse(204)


# -- toxics --------------------------------------------------------------------------


def _list_toxics(server: ProxyServer, body: bytes, proxy: str) -> HttpResponse:
    return json_response(200, [spec.to_json() for spec in server.get_proxy(proxy).toxics()])


def _create_toxic(server: ProxyServer, body: bytes, proxy: str) -> HttpResponse:
    target = server.get_proxy(proxy)
    found = fields(parse_json(body), _TOXIC_FIELDS)
    name, kind, stream = text(found, "name"), text(found, "type"), text(found, "stream")
    toxicity = number(found, "toxicity")
    spec = target.add_toxic(
        kind or "",
        name=name or None,
        stream="downstream" if stream is None else stream,
        toxicity=1.0 if toxicity is None else toxicity,
        attributes=found.get("attributes"),
    )
    return json_response(200, spec.to_json())


def _get_toxic(server: ProxyServer, body: bytes, proxy: str, name: str) -> HttpResponse:
    return json_response(200, server.get_proxy(proxy).get_toxic(name).to_json())


def _update_toxic(server: ProxyServer, body: bytes, proxy: str, name: str) -> HttpResponse:
    target = server.get_proxy(proxy)
    target.get_toxic(name)
    found = fields(parse_json(body), ("attributes", "toxicity"))
    spec = target.update_toxic(
        name, attributes=found.get("attributes"), toxicity=number(found, "toxicity")
    )
    return json_response(200, spec.to_json())


def _delete_toxic(server: ProxyServer, body: bytes, proxy: str, name: str) -> HttpResponse:
    server.get_proxy(proxy).remove_toxic(name)
    return HttpResponse(204)


# -- server --------------------------------------------------------------------------


def _populate(server: ProxyServer, body: bytes) -> HttpResponse:
    status, payload = populate(server, body)
    return json_response(status, payload)


def _reset(server: ProxyServer, body: bytes) -> HttpResponse:
    server.reset()
    return HttpResponse(204)


def _version(server: ProxyServer, body: bytes) -> HttpResponse:
    return json_response(200, {"version": version()})


# -- routing -------------------------------------------------------------------------

_ROUTES: dict[tuple[str, ...], dict[str, Endpoint]] = {
    ("proxies",): {"GET": _list_proxies, "POST": _create_proxy},
    ("proxies", "*"): {
        "GET": _get_proxy,
        "POST": _update_proxy,
        "PATCH": _update_proxy,
        "DELETE": _delete_proxy,
    },
    ("proxies", "*", "toxics"): {"GET": _list_toxics, "POST": _create_toxic},
    ("proxies", "*", "toxics", "*"): {
        "GET": _get_toxic,
        "POST": _update_toxic,
        "PATCH": _update_toxic,
        "DELETE": _delete_toxic,
    },
    ("populate",): {"POST": _populate},
    ("reset",): {"POST": _reset},
    ("version",): {"GET": _version},
}


def _match(target: str) -> tuple[dict[str, Endpoint], list[str]] | None:
    """The endpoints of the route ``target`` names and its path parameters, or None."""
    path = _path(target)
    if path is None:
        return None
    segments = unquote(path).split("/")[1:]
    if "" in segments:
        return None
    pattern = tuple("*" if i % 2 else s for i, s in enumerate(segments))
    methods = _ROUTES.get(pattern)
    if methods is None:
        return None
    return methods, segments[1::2]


def _path(target: str) -> str | None:
    """The path of an origin-form (``/p?q``) or absolute-form (``http://h/p``) target."""
    if "://" in target and not target.startswith("/"):
        rest = target.split("://", 1)[1]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    if not target.startswith("/"):
        return None
    return target.split("?", 1)[0].split("#", 1)[0]
