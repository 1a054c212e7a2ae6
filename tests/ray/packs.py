"""A tiny pack without services for the executors' long-tail tests: it records one
operation, then (by seed) returns, hangs forever, or waits for a file (``control/release``,
after writing ``control/started-SEED``: the pid of the process that runs it)."""

from __future__ import annotations

from pathlib import Path

SCENARIO_PY = """
import os
from pathlib import Path

import trio

from chaos.scenario import Scenario

CONTROL = Path(__file__).resolve().parent / "control"
HANG_SEED, WAIT_SEED = 1, 2


class Tiny(Scenario):
    id = "tiny"

    async def setup(self, ctx):
        pass

    async def workload(self, ctx):
        ctx.recorder.record("workload", "ok", "step", {"seed": ctx.seed})
        if ctx.seed == HANG_SEED:  # a run that never ends
            await trio.sleep_forever()
        if ctx.seed == WAIT_SEED:  # a run that waits until CONTROL/release exists
            # started-SEED holds the pid of the process running the run (a `chaos run`, or
            # a warm worker): written whole, then renamed
            partial = CONTROL / f".partial-started-{ctx.seed}"
            partial.write_text(str(os.getpid()))
            partial.rename(CONTROL / f"started-{ctx.seed}")
            while not (CONTROL / "release").exists():
                await trio.sleep(0.05)

    async def settled(self, ctx):
        return True

    async def final_state(self, ctx):
        return {}


SCENARIO = Tiny()
"""

FAULTS_TOML = """
[golden]
horizon_s = 1.0
max_events = 0
services = ["nothing"]

[[golden.templates]]
kind = "pause"
triggers = [{ type = "at_time", offset_s = [0.0, 0.5] }]
duration_s = [0.1, 0.2]
"""

HANG_SEED, WAIT_SEED = 1, 2


def write_tiny_pack(folder: Path) -> Path:
    """The pack in ``folder`` (created), with its ``control`` folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.py").write_text(SCENARIO_PY, encoding="utf-8")
    (folder / "faults.toml").write_text(FAULTS_TOML, encoding="utf-8")
    (folder / "README.md").write_text("# tiny\n\nA test pack.\n", encoding="utf-8")
    (folder / "control").mkdir(exist_ok=True)
    return folder


def write_waiting_pack(folder: Path) -> Path:
    """The tiny pack, but every seed other than ``HANG_SEED`` waits for ``control/release``
    (touching ``control/started-SEED`` first): runs stay in flight until the test lets go."""
    write_tiny_pack(folder)
    waiting = SCENARIO_PY.replace("if ctx.seed == WAIT_SEED:", "if ctx.seed != HANG_SEED:")
    assert waiting != SCENARIO_PY
    (folder / "scenario.py").write_text(waiting, encoding="utf-8")
    return folder
