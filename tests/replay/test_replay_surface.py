"""The public surface of replay.replay is what the docs promise."""

from __future__ import annotations

import inspect

import replay.replay as module


def test_public_names() -> None:
    assert sorted(module.__all__) == [
        "ReplayOutcome",
        "ReplayPlan",
        "ReplayReport",
        "prepare_replay",
        "replay_path",
        "replay_trace",
        "run_replays",
    ]
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_replay_trace_signature() -> None:
    assert inspect.iscoroutinefunction(module.replay_trace)
    params = inspect.signature(module.replay_trace).parameters
    assert list(params) == ["path", "times", "strict", "progress"]
    assert params["times"].default == 1
    assert params["strict"].kind is inspect.Parameter.KEYWORD_ONLY
