"""``chaos new PACK [DIR]``: a minimal working pack to start from (issue 22).

The pack is docs/scenarios.md's example (``tally``: a README specification, a scenario, one
service, one checker, a fault space per variant, a golden and one defective variant) with
its name changed; ``chaos validate DIR`` accepts it as written, from any directory.
``tests/test_new_pack.py`` checks that the templates are the page's pack, and validates one.
"""

# ruff: noqa: E501  (the templates' lines are the page's, as they are)
from __future__ import annotations

import re
from pathlib import Path

from ground._paths import check_out_dir, write_whole
from ground.errors import ConfigError

#: docs/scenarios.md's pack, ``tally`` written ``{id}``, ``Tally`` ``{cls}``, ``TALLY`` ``{env}``.
TEMPLATES: dict[str, str] = {
    "scenario.py": (
        '"""{id}: a counter service behind one proxied link; each add must count exactly once."""\n'
        "\n"
        "from __future__ import annotations\n"
        "\n"
        "import json\n"
        "import urllib.error\n"
        "import urllib.request\n"
        "from typing import Any\n"
        "\n"
        "import trio\n"
        "\n"
        "from chaos.context import RunContext\n"
        "from chaos.scenario import Scenario, Signal\n"
        "from chaos.services import free_port\n"
        "\n"
        'from . import checkers  # noqa: F401  (registers this pack\'s checkers under "{id}")\n'
        "\n"
        "ADDS = 15\n"
        "\n"
        "\n"
        "def _get(url: str, timeout: float) -> Any:\n"
        "    with urllib.request.urlopen(url, timeout=timeout) as response:\n"
        "        return json.loads(response.read())\n"
        "\n"
        "\n"
        "class {cls}(Scenario):\n"
        '    id = "{id}"\n'
        '    description = "a counter behind one link; a client retries adds that time out"\n'
        "    variants = {{\n"
        '        "golden": "the server remembers each add\'s id and counts a retry once",\n'
        '        "no-dedupe": "the golden server without its check of the add\'s id",\n'
        "    }}\n"
        '    invariants = ("counted_once",)\n'
        '    catches = {{"no-dedupe": "counted_once"}}\n'
        "    signals = {{\n"
        '        "no-dedupe": (\n'
        '            Signal("an add timed out and the client retried it", process="client",\n'
        '                   f="add", type="info"),\n'
        '            Signal("the server saw an id it had counted before", process="service:server",\n'
        '                   f="log", match="again"),\n'
        "        ),\n"
        "    }}\n"
        "    settle_timeout_s = 10.0\n"
        "\n"
        "    async def setup(self, ctx: RunContext) -> None:\n"
        "        port = free_port()\n"
        '        dedupe = "0" if ctx.variant == "no-dedupe" else "1"\n'
        "        await ctx.start_service(\n"
        '            "server",\n'
        '            ctx.pack_program("server.py"),\n'
        '            env={{"{env}_PORT": str(port), "{env}_DEDUPE": dedupe}},\n'
        '            ready_line="listening",\n'
        "        )\n"
        '        ctx.state["direct"] = f"http://127.0.0.1:{{port}}"\n'
        '        ctx.state["via_link"] = "http://" + ctx.add_link("client-server", f"127.0.0.1:{{port}}")\n'
        "\n"
        "    async def workload(self, ctx: RunContext) -> None:\n"
        "        for n in range(ADDS):\n"
        '            op = f"add-{{n}}"\n'
        "            url = f\"{{ctx.state['via_link']}}/add?id={{op}}\"\n"
        "            while True:  # retry with the same id until the server answers\n"
        '                ctx.recorder.record("client", "invoke", "add", op)\n'
        "                try:\n"
        "                    await trio.to_thread.run_sync(_get, url, 0.3)\n"
        "                except (OSError, urllib.error.URLError) as exc:\n"
        '                    ctx.recorder.record("client", "info", "add", op, error=str(exc))\n'
        "                    await trio.sleep(0.05)\n"
        "                    continue\n"
        '                ctx.recorder.record("client", "ok", "add", op)\n'
        "                break\n"
        "            await trio.sleep(0.1)\n"
        "\n"
        "    async def settled(self, ctx: RunContext) -> bool:\n"
        "        return True  # the workload waits for every add's answer\n"
        "\n"
        "    async def final_state(self, ctx: RunContext) -> dict[str, Any]:\n"
        "        state = await trio.to_thread.run_sync(_get, f\"{{ctx.state['direct']}}/state\", 3.0)\n"
        '        return {{"count": state["count"], "adds": ADDS}}\n'
        "\n"
        "\n"
        "SCENARIO = {cls}()\n"
    ),
    "checkers.py": (
        '"""{id}\'s checker, registered under the pack\'s id (importing this twice is harmless)."""\n'
        "\n"
        "from __future__ import annotations\n"
        "\n"
        "from collections.abc import Mapping\n"
        "from typing import Any\n"
        "\n"
        "from invariants import History, Verdict, register\n"
        "\n"
        "\n"
        '@register("counted_once", pack="{id}")\n'
        "def counted_once(history: History, final_state: Mapping[str, Any]) -> Verdict:\n"
        '    """The server\'s count equals the number of adds the client made, retries or not."""\n'
        '    count, adds = final_state["count"], final_state["adds"]\n'
        "    if count == adds:\n"
        '        return Verdict.holds("counted_once", f"{{adds}} adds counted once each")\n'
        '    return Verdict.violated("counted_once", f"{{adds}} adds counted {{count}} times",\n'
        "                            count=count, adds=adds)\n"
    ),
    "server.py": (
        '"""The service under test: GET /add?id=ID counts one add; GET /state reads the count."""\n'
        "\n"
        "import json\n"
        "import os\n"
        "from http.server import BaseHTTPRequestHandler, HTTPServer\n"
        "from urllib.parse import parse_qs, urlparse\n"
        "\n"
        'DEDUPE = os.environ["{env}_DEDUPE"] == "1"\n'
        "seen: set[str] = set()\n"
        "count = 0\n"
        "\n"
        "\n"
        "class Handler(BaseHTTPRequestHandler):\n"
        "    def do_GET(self) -> None:\n"
        "        global count\n"
        "        url = urlparse(self.path)\n"
        '        if url.path == "/add":\n'
        '            add_id = parse_qs(url.query)["id"][0]\n'
        "            if add_id in seen:\n"
        '                print(f"add {{add_id}} again", flush=True)\n'
        "            if not (DEDUPE and add_id in seen):\n"
        "                count += 1\n"
        "            seen.add(add_id)\n"
        '        body = json.dumps({{"count": count}}).encode()\n'
        "        self.send_response(200)\n"
        '        self.send_header("Content-Length", str(len(body)))\n'
        "        self.end_headers()\n"
        "        self.wfile.write(body)\n"
        "\n"
        "    def log_message(self, *args: object) -> None:\n"
        "        pass\n"
        "\n"
        "\n"
        'server = HTTPServer(("127.0.0.1", int(os.environ["{env}_PORT"])), Handler)\n'
        'print("listening", flush=True)\n'
        "server.serve_forever()\n"
    ),
    "faults.toml": (
        "# One table per variant. The workload makes 15 adds, one every 0.1 s or so (about 2 s).\n"
        "\n"
        "[golden]\n"
        "horizon_s = 3.0\n"
        "min_events = 1\n"
        "max_events = 2\n"
        'links = ["client-server"]\n'
        "\n"
        "[[golden.templates]]\n"
        'kind = "partition"\n'
        'params = {{ direction = ["both", "upstream", "downstream"] }}\n'
        'triggers = [{{ type = "at_time", offset_s = [0.0, 1.5] }}]\n'
        "duration_s = [0.3, 1.0]\n"
        "\n"
        "[[golden.templates]]\n"
        'kind = "latency"\n'
        "params = {{ latency_ms = [10, 500] }}\n"
        'triggers = [{{ type = "at_time", offset_s = [0.0, 1.5] }}]\n'
        "duration_s = [0.3, 1.0]\n"
        "\n"
        "# Its one fault shows when a request lands but its answer does not: a downstream partition.\n"
        "[no-dedupe]\n"
        "horizon_s = 3.0\n"
        "min_events = 1\n"
        "max_events = 1\n"
        'links = ["client-server"]\n'
        "\n"
        "[[no-dedupe.templates]]\n"
        'kind = "partition"\n'
        'params = {{ direction = "downstream" }}\n'
        'triggers = [{{ type = "at_time", offset_s = [0.2, 1.0] }}]\n'
        "duration_s = [0.5, 1.0]\n"
    ),
    "README.md": (
        "# {id}\n"
        "\n"
        "A counter service behind one proxied link (`client-server`). The client makes 15 adds, each\n"
        "with its own id, and retries an add that times out (0.3 s) with the same id until it is\n"
        "answered.\n"
        "\n"
        "**Invariant** `counted_once`: the server's final count equals the number of adds.\n"
        "\n"
        "## Variants\n"
        "- `golden`: the server remembers the ids it counted and counts a retry once.\n"
        "- `no-dedupe`: the same server without the id check. Its fault: a downstream partition (the\n"
        "  add lands, its answer does not, the client retries). Caught by `counted_once`.\n"
        "  **Diagnosis path:** `client info add` (a timed-out add), then the server's\n"
        "  `add ID again` log line, then a count above 15.\n"
    ),
}

_ID = re.compile(r"[a-z][a-z0-9_]*(-[a-z0-9_]+)*")


def check_pack_id(pack: str) -> None:
    """A pack's id: lowercase letters, digits, ``_`` and ``-`` (the checkers' namespace,
    the trace names); ConfigError otherwise."""
    if not _ID.fullmatch(pack):
        raise ConfigError(
            f"pack name {pack!r}: use lowercase letters, digits, '_' and '-', starting "
            "with a letter (e.g. outbox, order-relay)"
        )


def render(pack: str) -> dict[str, str]:
    """File name -> text of a new pack named ``pack``."""
    check_pack_id(pack)
    cls = "".join(part.capitalize() for part in re.split(r"[-_]", pack))
    env = pack.upper().replace("-", "_")
    return {name: text.format(id=pack, cls=cls, env=env) for name, text in TEMPLATES.items()}


def write_pack(pack: str, folder: Path) -> list[Path]:
    """Write the pack into ``folder`` (new, or empty) whole or not at all: ConfigError
    (exit 2) if it holds anything or cannot be written, before anything is written;
    WriteError (exit 3) if the disk fills, and a signal or error removes what was written."""
    files = render(pack)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"{folder} exists and is not an empty folder: give a new one")
    check_out_dir(folder, "the pack folder")

    def write() -> list[Path]:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in files.items():
            path = folder / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
        return written

    return write_whole(folder, write, "the pack")


def new_command(pack: str, folder: Path | None) -> int:
    """Write the pack; print what was written and what to run next; return 0."""
    target = folder if folder is not None else Path(pack)
    written = write_pack(pack, target)
    print(f"{pack}: a new pack in {target}/")
    for path in written:
        print(f"  {path.name}")
    print(f"next: chaos validate {target}  (then chaos search {target} --variant no-dedupe)")
    return 0
