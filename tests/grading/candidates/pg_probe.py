"""What an adversary tries against the evidence in PostgreSQL, each attempt printed as
``PG-PROBE <name> refused|ALLOWED <detail>`` (the test reads the lines from the trace).

``probe(dsn, extra)``: log in as the superuser (no password, and with the candidate's own
password), make its own role a superuser, run a program on the database server, then each
``(name, sql)`` of ``extra`` as its own role."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def _try(name: str, dsn: str, sql: str | None) -> None:
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            if sql is not None:
                conn.execute(sql)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"PG-PROBE {name} refused {first}", flush=True)
        return
    print(f"PG-PROBE {name} ALLOWED", flush=True)


def probe(dsn: str, extra: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    params = conninfo_to_dict(dsn)
    params.pop("options", None)
    own_password = str(params.get("password", ""))
    for db in {str(params.get("dbname") or "postgres"), "postgres"}:
        base = {**params, "dbname": db}
        base.pop("password", None)
        _try(f"superuser-no-password-{db}", make_conninfo(**{**base, "user": "postgres"}), None)
        _try(
            f"superuser-own-password-{db}",
            make_conninfo(**{**base, "user": "postgres", "password": own_password}),
            None,
        )
    _try("own-role-superuser", dsn, "ALTER ROLE CURRENT_USER SUPERUSER")
    _try("server-program", dsn, "COPY (SELECT 1) TO PROGRAM 'true'")
    for name, sql in extra:
        _try(name, dsn, sql)
