"""Old path of the error tree, now ``ground.errors``: each name warns once used, naming its
new home, for one release (CHANGELOG.md, 0.2.0)."""

from ground._moved import moved

__getattr__ = moved(
    __name__,
    dict.fromkeys(
        [
            "EXIT_HELD",
            "EXIT_VIOLATED",
            "EXIT_BAD_INPUT",
            "EXIT_HARNESS",
            "EXIT_HANGUP",
            "EXIT_INTERRUPTED",
            "EXIT_TERMINATED",
            "ChaosError",
            "ConfigError",
            "TraceError",
            "TraceFormatError",
            "TraceVersionError",
            "ServiceError",
            "Unreadable",
            "WriteError",
            "exit_code_for",
        ],
        "ground.errors",
    ),
)
