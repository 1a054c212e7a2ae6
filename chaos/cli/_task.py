"""``chaos task``: a scenario's task as a folder for a candidate, or as a Harbor task."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from chaos.grading import read_key
from chaos.harbor import write_harbor
from chaos.sandbox.graded import task_of
from chaos.scenario import load_scenario
from chaos.task import write_task_folder
from ground._paths import check_out_dir, write_whole
from ground.errors import EXIT_HELD, ConfigError

FORMATS = ("folder", "harbor")


def task_command(
    scenario: str,
    out: Path | None,
    format: str,
    heldout: int | None,
    heldout_key: Path | None,
) -> int:
    """Write the task; print what was written; return the exit code."""
    if format not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    loaded = load_scenario(scenario)
    task_of(loaded)
    if format == "folder" and (heldout is not None or heldout_key is not None):
        raise ConfigError("--heldout and --heldout-key go with --format harbor")
    key = read_key(heldout_key) if heldout_key is not None else None
    folder = out or Path(f"task-{loaded.id}" if format == "folder" else f"harbor-{loaded.id}")
    check_out_dir(folder, "-o")
    files = write_whole(folder, lambda: (
        write_task_folder(loaded, folder) if format == "folder"
        else write_harbor(loaded, folder, heldout=heldout, key=key)
    ), "the task folder")  # fmt: skip
    console = Console(soft_wrap=True, highlight=False)
    console.print(f"{loaded.id}: {format} task written to {escape(str(folder))}/")
    bundled: dict[str, int] = {}
    for file in files:
        relative = file.relative_to(folder)
        parts = relative.parts
        if len(parts) > 2 and parts[:2] in (("environment", "chaos-harness"),
                                            ("environment", "pack")):  # fmt: skip
            bundled[f"{parts[0]}/{parts[1]}/"] = bundled.get(f"{parts[0]}/{parts[1]}/", 0) + 1
            continue
        console.print(f"  {escape(str(relative))}")
    for where, count in bundled.items():
        console.print(f"  {escape(where)} ({count} files)")
    return EXIT_HELD
