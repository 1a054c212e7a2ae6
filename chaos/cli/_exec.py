"""Where a batch command's runs go (``--ray [ADDRESS]``, ``--ray-cpus``, ``--run-timeout``)
and the progress bar over its runs on stderr. Shared by sweep, validate and grade."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chaos.executor import Executor, LocalExecutor, check_run_timeout
from ground.errors import ConfigError

DEFAULT_RAY_CPUS = 1.0


@dataclass(frozen=True)
class ExecFlags:
    """The executor flags of a batch command, as given."""

    ray: str | None = None
    ray_cpus: float | None = None
    run_timeout: float | None = None

    def check(self) -> None:
        """Everything that needs no connection: ConfigError (exit 2) before anything runs."""
        check_run_timeout(self.run_timeout)
        if self.ray is None:
            if self.ray_cpus is not None:
                raise ConfigError("--ray-cpus goes with --ray")
            return
        from chaos.executor_ray import check_address, check_cpus, import_ray

        check_address(self.ray)
        check_cpus(self.ray_cpus if self.ray_cpus is not None else DEFAULT_RAY_CPUS)
        import_ray()

    @property
    def custom(self) -> bool:
        """Runs must go through an executor (validate runs in-process otherwise)."""
        return self.ray is not None or self.run_timeout is not None


@contextmanager
def open_executor(flags: ExecFlags, max_in_flight: int | None = None) -> Iterator[Executor]:
    """The executor the flags ask for: worker processes here, or Ray (connected first, so an
    unreachable cluster is exit 2 before any run; a local instance stops at the end)."""
    flags.check()
    if flags.ray is None:
        yield LocalExecutor(run_timeout=flags.run_timeout)
        return
    from chaos.executor_ray import RayExecutor, connect, disconnect

    owned = connect(flags.ray)
    try:
        yield RayExecutor(
            cpus=flags.ray_cpus if flags.ray_cpus is not None else DEFAULT_RAY_CPUS,
            run_timeout=flags.run_timeout,
            max_in_flight=max_in_flight,
            address=flags.ray,
        )
    finally:
        if owned:
            disconnect()


class Bar:
    """A progress bar over runs on stderr: done/total, outcomes so far, runs per minute."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress = progress
        self._task = progress.add_task("runs", total=total, counts="")
        self._total = total
        self._counts: Counter[str] = Counter()
        self._started = time.monotonic()

    def advance(self, outcome: str, line: str | None = None) -> None:
        """One run finished with ``outcome`` (held, violated, error, timeout...); ``line``
        (if any) is printed above the bar."""
        self._counts[outcome] += 1
        done = sum(self._counts.values())
        if line is None and not self._progress.console.is_terminal:
            line = f"{done}/{self._total} runs: {outcome}"  # a pipe hears of every run
        if line is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        minutes = (time.monotonic() - self._started) / 60
        rate = f"{done / minutes:.1f} runs/min" if minutes > 0 else ""
        counts = ", ".join(f"{n} {name}" for name, n in sorted(self._counts.items()))
        self._progress.update(self._task, advance=1, counts=f"{counts}; {rate}")


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Bar]:
    """The bar while the block runs (left on stderr when it ends)."""
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True, highlight=False),
    )
    with progress:
        yield Bar(progress, total)
