"""The ground floor of chaos-harness: what every other package may import, importing nothing
of the project itself (docs/architecture.md).

::

    ground/
      errors.py     the exception tree and the exit codes of every command
      rng.py        named random streams of a run seed, the seed's bounds
      _signals.py   SIGINT/SIGTERM/SIGHUP -> cleanup, exits 130/143/129
      _checks.py    option bounds (durations, limits, counts)
      _paths.py     every input and output path: a regular file or a new path; atomic writes
      _portal.py    a trio loop in a thread, called from synchronous code
      _moved.py     old import paths of moved names: a DeprecationWarning naming the new one

This file imports nothing: importing ``ground.errors`` loads ``ground`` and that module only.
"""
