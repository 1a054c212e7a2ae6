"""The proxy's HTTP error tree: each error carries its Toxiproxy status and message.

::

    ChaosError                 (ground.errors)
      ProxyAPIError            an HTTP status and a Toxiproxy error message
        ProxyNotFound            404 "proxy not found"
        ProxyExists              409 "proxy already exists"
        ToxicNotFound            404 "toxic not found"
        ToxicExists              409 "toxic already exists"
        InvalidToxic             400 "invalid toxic type" (or a bad attribute)
        BadRequest               400 "bad request body: ..." / "missing required field: ..."
        BindError                500 "listen tcp ...: bind: address already in use"

``ProxyAPIError.to_json`` is the one place an error becomes Toxiproxy's JSON body.
"""

from __future__ import annotations

from typing import Any

from ground.errors import ChaosError


class ProxyAPIError(ChaosError):
    """An error with a Toxiproxy HTTP status and message."""

    status: int = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def to_json(self) -> dict[str, Any]:
        return {"error": self.message, "status": self.status}


class ProxyNotFound(ProxyAPIError):
    status = 404

    def __init__(self, message: str = "proxy not found") -> None:
        super().__init__(message)


class ProxyExists(ProxyAPIError):
    status = 409

    def __init__(self, message: str = "proxy already exists") -> None:
        super().__init__(message)


class ToxicNotFound(ProxyAPIError):
    status = 404

    def __init__(self, message: str = "toxic not found") -> None:
        super().__init__(message)


class ToxicExists(ProxyAPIError):
    status = 409

    def __init__(self, message: str = "toxic already exists") -> None:
        super().__init__(message)


class InvalidToxic(ProxyAPIError):
    status = 400

    def __init__(self, message: str = "invalid toxic type") -> None:
        super().__init__(message)


class BadRequest(ProxyAPIError):
    status = 400


class BindError(ProxyAPIError):
    status = 500
