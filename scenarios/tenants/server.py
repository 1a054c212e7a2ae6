"""The tenants API process: ``python -m scenarios.tenants.server``.

Environment (see TASK.md): PORT, DATABASE_URL (the app role), OWNER_DATABASE_URL (the owner
role, for the migration), APP_ROLE (the app role's name, for grants); VARIANT picks one of
``variants.py`` (default: golden).
"""

from __future__ import annotations

import asyncio
import os

from scenarios.tenants.variants import api_for


def main() -> None:
    api = api_for(os.environ.get("VARIANT", "golden"))(
        os.environ["DATABASE_URL"], os.environ["OWNER_DATABASE_URL"], os.environ["APP_ROLE"]
    )
    asyncio.run(api.serve(int(os.environ["PORT"])))


if __name__ == "__main__":
    main()
