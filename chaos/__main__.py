"""``python -m chaos`` and the ``chaos`` program: signals are handled from the first line.

SIGINT, SIGTERM and SIGHUP get the harness's handlers before the CLI's imports (typer, trio,
the services) run, so even a Ctrl-C during start-up is one line and exit 130, not a
KeyboardInterrupt traceback.
"""

from __future__ import annotations

from chaos import _signals


def main() -> None:
    _signals.install()
    try:
        try:
            from chaos.cli import main as cli_main
        except _signals.Interrupted as exc:
            _signals.ignore_further()
            _signals.say(
                f"chaos: error: {_signals.describe(exc.signum)} before the command started"
            )
            raise SystemExit(exc.exit_code) from None
        cli_main()
    finally:
        _signals.ignore_further()  # done: a signal now must not kill the exit silently


if __name__ == "__main__":
    main()
