"""Old path of the replay engine, now ``chaos.replay`` (the engines' floor; this package holds
the trace format): each name warns once used, naming its new home, for one release."""

from ground._moved import moved

__getattr__ = moved(
    __name__,
    {
        **dict.fromkeys(
            ["ReplayPlan", "prepare_replay", "replay_path", "replay_trace", "run_replays"],
            "chaos.replay",
        ),
        **dict.fromkeys(["ReplayOutcome", "ReplayReport"], "replay.outcome"),
    },
)
