"""Old import paths of moved names keep working for one release: each warns, naming the new
path, and gives the very object the new path holds (CHANGELOG.md lists them)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

#: (old module, name, new module): every path CHANGELOG.md's "Moved" sections list.
_ERRORS = ["EXIT_HELD", "EXIT_VIOLATED", "EXIT_BAD_INPUT", "EXIT_HARNESS", "EXIT_HANGUP",
           "EXIT_INTERRUPTED", "EXIT_TERMINATED", "ChaosError", "ConfigError", "TraceError",
           "TraceFormatError", "TraceVersionError", "ServiceError", "Unreadable", "WriteError",
           "exit_code_for"]  # fmt: skip
_RNG = ["SEED_MAX", "check_seed", "derive_seed", "derive_rng"]
MOVED = [
    *[("chaos.errors", name, "ground.errors") for name in _ERRORS],
    *[("chaos.rng", name, "ground.rng") for name in _RNG],
    ("chaos.context", "Subject", "chaos.nemesis"),
    ("chaos.scenario", "Subject", "chaos.nemesis"),
    ("chaos.warm", "run_one", "chaos.warm_worker"),
    ("chaos.warm", "serve", "chaos.warm_worker"),
    ("chaos.warm", "main", "chaos.warm_worker"),
    ("chaos.warm", "WorkerGone", "chaos.warm_pool"),
    ("chaos.warm", "WarmWorker", "chaos.warm_pool"),
    ("chaos.warm", "open_warm_worker", "chaos.warm_pool"),
    ("chaos.warm", "WarmPool", "chaos.warm_pool"),
    ("chaos.warm", "open_warm_pool", "chaos.warm_pool"),
    *[
        ("chaos.search", name, "chaos.search_scenario")
        for name in (
            "applied_faults",
            "default_search_trace",
            "resume_schedule",
            "search_scenario",
            "search_space",
        )
    ],
    ("replay.replay", "ReplayPlan", "chaos.replay"),
    ("replay.replay", "prepare_replay", "chaos.replay"),
    ("replay.replay", "replay_path", "chaos.replay"),
    ("replay.replay", "replay_trace", "chaos.replay"),
    ("replay.replay", "run_replays", "chaos.replay"),
    ("replay.replay", "ReplayOutcome", "replay.outcome"),
    ("replay.replay", "ReplayReport", "replay.outcome"),
    *[
        ("chaos.task", name, "chaos.harbor")
        for name in ("new_key", "verifier_timeout_s", "write_harbor")
    ],
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{o}.{n}" for o, n, _ in MOVED])
def test_an_old_path_warns_naming_the_new_one_and_gives_the_same_object(
    old: str, name: str, new: str
) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} moved to {new}\.{name};"):
        found = getattr(module, name)
    assert found is getattr(importlib.import_module(new), name)


def test_a_move_after_a_release_keeps_its_old_path_through_the_next_one() -> None:
    import chaos.task

    with pytest.warns(DeprecationWarning, match=r"the old path goes in 0\.4\.0$"):
        chaos.task.new_key  # noqa: B018
    with pytest.warns(DeprecationWarning, match=r"the old path goes in 0\.3\.0$"):
        importlib.import_module("replay.replay").replay_trace  # noqa: B018


def test_from_import_of_an_old_path_warns_too() -> None:
    with pytest.warns(DeprecationWarning, match="replay.replay.replay_trace moved to"):
        from replay.replay import replay_trace
    from chaos.replay import replay_trace as new

    assert replay_trace is new


def test_an_unknown_name_of_a_shimmed_module_is_an_attribute_error() -> None:
    module = importlib.import_module("replay.replay")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        module.nothing  # noqa: B018


def test_every_public_name_of_the_ground_has_its_old_path() -> None:
    import ground.errors
    import ground.rng

    for module, old in ((ground.errors, "chaos.errors"), (ground.rng, "chaos.rng")):
        public = {
            name
            for name, value in vars(module).items()
            if name.isidentifier()
            and not name.startswith("_")
            and name != "annotations"
            and not isinstance(value, types.ModuleType)
            and getattr(value, "__module__", module.__name__) == module.__name__
        }
        assert public == {n for o, n, _ in MOVED if o == old}


def test_python_m_chaos_warm_still_starts_a_worker_with_a_warning() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-m", "chaos.warm"],
        input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "chaos.warm.main moved to chaos.warm_worker.main" in done.stderr


def test_importing_a_shimmed_module_loads_nothing_above_it() -> None:
    code = "import sys, replay.replay; print('chaos.replay' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
