"""The lease table, its audit trail and who may touch which: set up by the harness.

The harness (the cluster's superuser) creates, before any worker runs:

- ``leases (name, holder, token, expires_at)`` with the row ``'job'`` (free: no holder,
  token 0, expired). Workers may SELECT and UPDATE it, nothing else: how they take, renew
  and release the lease is theirs to write (TASK.md).
- ``lease_audit``: one row per change of ``leases``, written by a trigger whose function
  runs as ``lease_recorder`` (SECURITY DEFINER): a role that cannot log in, with no power
  but INSERT on ``lease_audit`` (never the superuser: the trigger fires inside a worker's
  transaction, so whatever that session could slip into it would run with the function
  owner's rights), and a search path of ``pg_catalog`` first with every name qualified. It
  records the change's session user, i.e. the worker role that made it, whatever the row
  says. Workers have no privilege on it and cannot disable the trigger (only the table's
  owner can); the trigger also NOTIFYs the auditor, which takes a notification as a
  wake-up only and reads the rows from ``lease_audit`` (any role may NOTIFY any channel).
- one login role per worker with its own password, and authentication by password for
  every TCP connection (the superuser gets a password only the harness knows): a worker can
  act only as itself.

What the trigger records per change (``kind``):

    grant    the holder or the token changed (and there is a holder)
    renew    only the expiry changed
    release  the holder was cleared (or the row deleted)

with ``at`` = clock_timestamp() (the database's clock, when the change was made) and
``until`` = least(the expiry the worker wrote, at + TTL), never before ``at``: the lease as
the database grants it, whatever clock the worker used to compute its expiry.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

LEASE_NAME = "job"
#: How many connections a worker's role may hold at once.
CONNECTION_LIMIT = 20
CHANNEL = "lease_audit"
#: The harness's own connections wait this long: a loaded machine is slow, not broken.
HARNESS_CONNECT_TIMEOUT_S = 30

SCHEMA = """
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text,
    token      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO leases (name) VALUES ({lease_name});

CREATE TABLE lease_audit (
    id         bigserial PRIMARY KEY,
    kind       text NOT NULL,
    name       text NOT NULL,
    token      bigint NOT NULL,
    actor      text NOT NULL,
    at         timestamptz NOT NULL,
    until      timestamptz NOT NULL,
    holder     text,
    expires_at timestamptz
);
REVOKE ALL ON lease_audit FROM PUBLIC;

CREATE ROLE {recorder} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
GRANT USAGE ON SCHEMA {schema} TO {recorder};
GRANT INSERT, SELECT (id) ON {schema}.lease_audit TO {recorder};
GRANT USAGE ON SEQUENCE {schema}.lease_audit_id_seq TO {recorder};
GRANT SELECT ON {schema}.leases TO {recorder};

CREATE FUNCTION {schema}.lease_audit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t  timestamptz := clock_timestamp();
    r  {schema}.leases;
    k  text;
    u  timestamptz;
    id bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD; k := 'release'; u := t;
    ELSE
        r := NEW;
        IF NEW.holder IS NULL THEN
            k := 'release'; u := t;
        ELSIF TG_OP = 'INSERT' OR NEW.holder IS DISTINCT FROM OLD.holder
              OR NEW.token IS DISTINCT FROM OLD.token THEN
            k := 'grant';
        ELSIF NEW.expires_at IS DISTINCT FROM OLD.expires_at THEN
            k := 'renew';
        ELSE
            RETURN NULL;
        END IF;
        IF u IS NULL THEN
            u := greatest(t, least(NEW.expires_at, t + make_interval(secs => {ttl})));
        END IF;
    END IF;
    INSERT INTO {schema}.lease_audit (kind, name, token, actor, at, until, holder, expires_at)
    VALUES (k, r.name, r.token, session_user, t, u, r.holder, r.expires_at)
    RETURNING lease_audit.id INTO id;
    PERFORM pg_notify({channel}, json_build_object(
        'id', id, 'kind', k, 'name', r.name, 'token', r.token, 'actor', session_user,
        'at', extract(epoch FROM t), 'until', extract(epoch FROM u), 'holder', r.holder,
        'expires_at', CASE WHEN isfinite(r.expires_at)
                           THEN extract(epoch FROM r.expires_at) END
    )::text);
    RETURN NULL;
END $$;
ALTER FUNCTION {schema}.lease_audit() OWNER TO {recorder};
REVOKE ALL ON FUNCTION {schema}.lease_audit() FROM PUBLIC;

CREATE TRIGGER lease_audit AFTER INSERT OR UPDATE OR DELETE ON {schema}.leases
    FOR EACH ROW EXECUTE FUNCTION {schema}.lease_audit();
"""
#: The role the audit trigger's function runs as.
RECORDER = "lease_recorder"

#: Every TCP connection authenticates with a password (the template cluster trusts all).
HBA = """\
# written by the leases scenario: every connection proves who it is
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""


@dataclass(frozen=True)
class Access:
    """Who connects as whom: the harness's own DSN and each worker's role and password."""

    admin_dsn: str
    #: worker id -> (role, password)
    roles: dict[str, tuple[str, str]]
    #: The schema of ``leases`` and ``lease_audit``.
    schema: str = "public"

    def worker_dsn(self, worker: str, address: str, database: str) -> str:
        role, password = self.roles[worker]
        return f"postgresql://{role}:{password}@{address}/{database}"

    def role_names(self) -> dict[str, str]:
        """role -> worker id (how the auditor names the actor of a change)."""
        return {role: worker for worker, (role, _) in self.roles.items()}


def role_for(worker: str) -> str:
    return worker.replace("-", "_")


def prepare(
    dsn: str,
    host: str,
    port: int,
    user: str,
    database: str,
    workers: list[str],
    ttl_s: float,
    *,
    secure: bool = True,
) -> Access:
    """Create the tables, the audit trigger and the worker roles; then require passwords.

    Runs as the superuser of a cluster the run owns (embedded): with ``secure`` it rewrites
    the cluster's pg_hba.conf and reloads it, so from then on the harness connects with
    ``admin_dsn``. A run's cluster already requires passwords (``RunContext.postgres``):
    the scenario passes ``secure=False`` and ``dsn`` (which carries the superuser's
    password) stays the admin DSN.
    """
    admin_password = secrets.token_hex(16)
    roles = {w: (role_for(w), secrets.token_hex(16)) for w in workers}
    with psycopg.connect(dsn, autocommit=True, connect_timeout=HARNESS_CONNECT_TIMEOUT_S) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        conn.execute(
            sql.SQL(SCHEMA).format(
                lease_name=sql.Literal(LEASE_NAME),
                schema=sql.Identifier(schema[0]),
                ttl=sql.Literal(float(ttl_s)),
                channel=sql.Literal(CHANNEL),
                recorder=sql.Identifier(RECORDER),
            )
        )
        for role, password in roles.values():
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS "
                    "NOREPLICATION CONNECTION LIMIT {} PASSWORD {}"
                ).format(sql.Identifier(role), sql.Literal(CONNECTION_LIMIT), sql.Literal(password))
            )
            conn.execute(
                sql.SQL("GRANT SELECT, UPDATE ON leases TO {}").format(sql.Identifier(role))
            )
        if not secure:
            return Access(dsn, roles, schema[0])
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                sql.Identifier(user), sql.Literal(admin_password)
            )
        )
        hba = conn.execute("SHOW hba_file").fetchone()
        assert hba is not None
        Path(hba[0]).write_text(HBA)
        conn.execute("SELECT pg_reload_conf()")
    admin = f"postgresql://{user}:{admin_password}@{host}:{port}/{database}"
    return Access(admin, roles, schema[0])
