"""The API's variants: the golden implementation and its defective siblings.

Each defective variant is the golden API (``api.py``) minus exactly one property; README.md
gives each one's fault, the fault that exposes it and its diagnosis path.
"""

from __future__ import annotations

from typing import ClassVar

from psycopg import sql

from ground.errors import ConfigError
from scenarios.tenants.api import MIGRATION, Session, TenantsApi

_POLICY_START, _POLICY_END = "-- requests policy\n", "-- end requests policy\n"


class SessionTenantApi(TenantsApi):
    """The tenant is a session setting (``SET``), not a transaction's.

    The request's first transaction sets it with ``SET app.tenant``, which outlives the
    transaction; a transaction retried on another pooled connection (after a reset, say)
    runs under whatever tenant that connection's previous request set.
    """

    description: ClassVar[str] = (
        "the tenant set per session (SET, once per request), not per transaction"
    )

    def tenant_statements(self, session: Session) -> list[sql.Composable]:
        if session.transactions_sent:  # SET lasts for the session: sent once is enough
            return []
        return [sql.SQL("SET app.tenant = {}").format(sql.Literal(session.tenant))]


def _without_requests_policy(migration: str) -> str:
    start, end = migration.index(_POLICY_START), migration.index(_POLICY_END)
    return migration[:start] + migration[end + len(_POLICY_END) :]


class MissingPolicyApi(TenantsApi):
    """``app.requests`` (the idempotency records) has no row-level security.

    Nothing reads it on the normal path; the stored response of a retried request is looked
    up by key alone, so without a policy it may be another tenant's (keys are unique per
    tenant only).
    """

    description: ClassVar[str] = "no row-level security on app.requests (the idempotency records)"
    migration: ClassVar[str] = _without_requests_policy(MIGRATION)


class DefinerFunctionApi(TenantsApi):
    """``app.create_item`` is ``SECURITY DEFINER``: it runs as the owner role, which
    row-level security does not apply to, so its replay lookup sees every tenant's keys."""

    description: ClassVar[str] = (
        "app.create_item is SECURITY DEFINER: it runs as the table owner and bypasses RLS"
    )
    migration: ClassVar[str] = MIGRATION.replace("SECURITY INVOKER", "SECURITY DEFINER")


#: Every variant of the scenario (``Tenants.variants`` is derived from it).
VARIANTS: dict[str, type[TenantsApi]] = {
    "golden": TenantsApi,
    "session-tenant": SessionTenantApi,
    "missing-policy": MissingPolicyApi,
    "definer-function": DefinerFunctionApi,
}


def api_for(variant: str) -> type[TenantsApi]:
    try:
        return VARIANTS[variant]
    except KeyError:
        raise ConfigError(
            f"unknown variant {variant!r} (tenants has: {', '.join(VARIANTS)})"
        ) from None
