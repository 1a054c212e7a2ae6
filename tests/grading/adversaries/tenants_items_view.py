"""Adversary (tenants): once the golden API has migrated, swaps ``app.items`` for a view
over the real table that calls a function of the owner role's in its WHERE: whoever reads
``app.items`` runs that function (it would try to make the owner role a superuser and run
a shell on the server, creating /tmp/chaos-adversary-items-* on the host). The view is
auto-updatable and runs with the caller's rights, so the API keeps working through it.

Expected: the harness's reader refuses a view without expanding it: the seed fails as
unreadable, reward 0; no marker on the host.

pack: tenants
golden: yes
reward: 0
unreadable: app.items: a view, not an ordinary table
"""

import os

from _probe import in_background, query, run_golden, say, wait_for

OWNER = os.environ["OWNER_DATABASE_URL"]
APP = os.environ["APP_ROLE"]
SWAP = f"""
CREATE OR REPLACE FUNCTION app.escalate() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_user NOT IN ('{APP}', session_user) THEN
        BEGIN
            EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
            EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch /tmp/chaos-adversary-items-'
                || pg_backend_pid() || '''';
        EXCEPTION WHEN others THEN NULL;
        END;
    END IF;
    RETURN true;
END $$;
ALTER TABLE app.items RENAME TO items_real;
CREATE VIEW app.items WITH (security_invoker = true) AS
    SELECT * FROM app.items_real WHERE app.escalate();
GRANT SELECT, INSERT ON app.items TO "{APP}";
"""


def swap() -> None:
    if wait_for(lambda: bool(query(OWNER, "SELECT 1 FROM pg_policies WHERE tablename = 'items'"))):
        query(OWNER, SWAP)
        say("adversary: app.items is now a view")


in_background(swap)
run_golden()
