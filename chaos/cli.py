"""The ``chaos`` command line: one typer app, one sub-app or command per concept.

Adding a command: define it on ``app`` (``@app.command("run")``) or on a sub-app, raise
``ConfigError`` for bad input (exit 2) and let other ``ChaosError`` propagate (exit 3);
call ``_fail(message, code)`` for any other one-line failure. ``main`` turns every error,
usage errors included, into one ``chaos: error: <message>`` line on stderr, never a
traceback::

    chaos --version
    chaos proxy serve [--host 127.0.0.1] [--port 8474] [--seed N] [--dial-timeout S]
    chaos gc [--json]

Signals (the ``chaos`` program): SIGINT, SIGTERM and SIGHUP stop a command after its cleanup
with exit 130, 143 and 129 and one line (chaos._signals).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import trio
import typer

from chaos import _signals
from chaos.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    ChaosError,
    ConfigError,
    exit_code_for,
)
from faults.proxy.errors import ProxyAPIError

app = typer.Typer(
    name="chaos",
    help="Fault-injection chaos harness with deterministic replay.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
proxy_app = typer.Typer(help="The embedded Toxiproxy-compatible proxy.", no_args_is_help=True)
app.add_typer(proxy_app, name="proxy")


# The executor flags of the batch commands (sweep, validate, grade): chaos._cli_exec.
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="Run each run as a Ray task: on the cluster at ADDRESS (HOST:PORT, "
        "ray://HOST:PORT, auto), or on a new local Ray instance without one "
        "(pip install -e '.[ray]').",
    ),
]
RayCpusOption = Annotated[
    float | None, typer.Option(help="With --ray: CPUs Ray reserves for each run (default 1).")
]
RunTimeoutOption = Annotated[
    float | None,
    typer.Option(
        help="Seconds a run may take: one still going is stopped, its outcome timeout, what "
        "it recorded kept in its trace (default: no limit)."
    ),
]


def _exec_flags(ray: str | None, ray_cpus: float | None, run_timeout: float | None) -> Any:
    from chaos._cli_exec import ExecFlags

    return ExecFlags(ray, ray_cpus, run_timeout)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``chaos: error: <message>`` (one line) on stderr and exit with ``code``."""
    first_line = " ".join(str(message).split())
    _signals.say(f"chaos: error: {first_line}")
    raise SystemExit(code)


def _exit_with(command: Callable[..., int], *args: Any) -> NoReturn:
    """Run a command that starts runs; exit with its code. Ctrl-C, SIGTERM or SIGHUP (alone or
    grouped by a nursery) is one line and exit 130/143/129: the runs have removed what they
    started. Stale registrations of dead runs are reaped first."""
    from chaos.services.registry import collect_quietly

    collect_quietly()
    try:
        code = command(*args)
    except BaseException as exc:
        _exit_if_stopped(exc)
        raise
    raise SystemExit(code)


def _exit_if_stopped(exc: BaseException) -> None:
    """Exit 128+N with one line when ``exc`` (or the failure that followed) comes from a
    signal or a cancellation: whatever it is, the signal is what the user sees."""
    from chaos.run import is_interruption

    signum = _signals.received()
    if isinstance(exc, _signals.Interrupted):
        signum = exc.signum
    if signum is None and not is_interruption(exc):
        return
    if signum is None:
        signum = signal.SIGINT
    _signals.ignore_further()
    _signals.say(
        f"chaos: error: {_signals.describe(signum)}: every process, proxy and temp dir "
        "of the run was removed"
    )
    raise SystemExit(_signals.exit_code(signum))


def _version() -> str:
    try:
        return metadata.version("chaos-harness")
    except metadata.PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        print(f"chaos-harness {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Fault-injection chaos harness with deterministic replay."""


# -- chaos proxy ---------------------------------------------------------------------


@proxy_app.command("serve")
def proxy_serve(
    host: Annotated[str, typer.Option(help="Address to bind (an IP or localhost).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="API port (0: any free).")] = 8474,
    seed: Annotated[int, typer.Option(help="Seed of every toxicity and jitter draw.")] = 0,
    dial_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for an upstream to accept.")
    ] = 5.0,
    busy_poll_us: Annotated[
        float,
        typer.Option(
            help="Microseconds an idle toxic-free connection polls before it sleeps: lower "
            "round-trip latency for at most that much CPU per wait (0: sleep at once)."
        ),
    ] = 150.0,
) -> None:
    """Serve the Toxiproxy v2 HTTP API (a drop-in Toxiproxy) until Ctrl-C."""
    if not dial_timeout > 0:
        raise ConfigError(f"dial timeout must be > 0, got {dial_timeout}")
    if not 0 <= busy_poll_us <= 1_000_000:
        raise ConfigError(f"busy poll must be between 0 and 1000000 µs, got {busy_poll_us}")
    logging.basicConfig(level=logging.WARNING, format="chaos: %(name)s: %(message)s")
    try:
        _signals.run(_serve_proxy, host, port, seed, dial_timeout, busy_poll_us)
    except ProxyAPIError as exc:  # the port is taken, or the host is not bindable
        _fail(exc.message, 2)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        pass


async def _serve_proxy(
    host: str, port: int, seed: int, dial_timeout: float, busy_poll_us: float
) -> None:
    from faults.proxy.http import open_toxiproxy

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with open_toxiproxy(
            host, port, seed, dial_timeout=dial_timeout, busy_poll_us=busy_poll_us
        ) as (_, url):
            print(f"chaos proxy: Toxiproxy API on {url} (seed {seed})", flush=True)
            async for _signum in signals:
                return


# -- chaos run / show ----------------------------------------------------------------


@app.command("run")
def run(
    scenario: Annotated[str, typer.Argument(help="A built-in scenario (payments) or a folder.")],
    seed: Annotated[
        int | None,
        typer.Option(
            help="The run seed: same seed, same faults (default 0; with --schedule, the file's)."
        ),
    ] = None,
    variant: Annotated[str, typer.Option(help="golden or a defective variant.")] = "golden",
    out: Annotated[
        Path | None, typer.Option(help="Trace file (default traces/SCENARIO-VARIANT-seedN.trace).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON verdict object.")] = False,
    postgres_dsn: Annotated[
        str | None, typer.Option(help="Use this PostgreSQL instead of an embedded one.")
    ] = None,
    nats_url: Annotated[
        str | None, typer.Option(help="Use this NATS (JetStream) instead of an embedded one.")
    ] = None,
    impl: Annotated[
        Path | None,
        typer.Option(help="Run this program in place of the task's service (a graded run)."),
    ] = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(help="With --impl: a limit NAME=VALUE (see docs/grading.md); repeatable."),
    ] = None,
    isolation: Annotated[
        str | None, typer.Option(help="With --impl: root, uid or user (default: the most).")
    ] = None,
    hide: Annotated[
        list[Path] | None,
        typer.Option(help="With --impl: a path the candidate must not see; repeatable."),
    ] = None,
    no_faults: Annotated[
        bool, typer.Option("--no-faults", help="Inject no fault (an empty schedule).")
    ] = False,
    sandbox: Annotated[
        str | None,
        typer.Option(help="With --impl: process (default) or docker (docs/containers.md)."),
    ] = None,
    schedule: Annotated[
        Path | None,
        typer.Option(
            help="Run exactly this fault schedule (JSON {seed, space_hash, events}, as "
            "--json prints it); the run seed is its seed."
        ),
    ] = None,
) -> None:
    """Run a scenario once: exit 0 all invariants held, 1 violated, 2 bad input, 3 error."""
    from chaos._cli_run import run_command

    graded = (impl, limit or [], isolation, hide or [], sandbox)
    _exit_with(
        run_command, scenario, seed, variant, out, as_json, postgres_dsn, nats_url, graded,
        no_faults, schedule,
    )  # fmt: skip


@app.command("show")
def show(
    trace: Annotated[Path, typer.Argument(help="A trace written by chaos run.")],
    faults_only: Annotated[bool, typer.Option(help="Only fault spans and nemesis ops.")] = False,
    ops_only: Annotated[bool, typer.Option(help="Only workload operations.")] = False,
    since: Annotated[float | None, typer.Option(help="From this many seconds in.")] = None,
    until: Annotated[float | None, typer.Option(help="Up to this many seconds in.")] = None,
) -> None:
    """Print a trace as a plain-text timeline."""
    from chaos._cli_run import show_command

    show_command(trace, faults_only, ops_only, since, until)


# -- chaos replay --------------------------------------------------------------------


@app.command("replay")
def replay(
    trace: Annotated[Path, typer.Argument(help="A trace written by chaos run.")],
    times: Annotated[int, typer.Option(help="How many replays (replay fidelity is k/N).")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON report object.")] = False,
    strict: Annotated[
        bool, typer.Option(help="Scenario or version drift is an error (exit 2), not a warning.")
    ] = False,
    scenario: Annotated[
        str | None,
        typer.Option(help="The pack to replay with (default: the one the trace recorded)."),
    ] = None,
    stress: Annotated[
        str | None,
        typer.Option(
            metavar="[N]",
            help="Replay beside N busy-loop processes (CPU pressure); alone: as many as the "
            "trace's recorded load suggests.",
        ),
    ] = None,
) -> None:
    """Re-run a trace with its own faults: exit 0 reproduced, 1 not, 2 bad input, 3 error."""
    from chaos._cli_replay import replay_command

    _exit_with(replay_command, trace, times, as_json, strict, scenario, stress)


# -- chaos report --------------------------------------------------------------------


@app.command("report")
def report(
    trace: Annotated[Path, typer.Argument(help="The original trace.")],
    replays: Annotated[
        list[Path] | None, typer.Argument(help="Replay traces to show beside the original.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="HTML file to write (default: TRACE.report.html)."),
    ] = None,
) -> None:
    """Write one self-contained HTML report (timeline, ops, verdicts) and print its path."""
    from chaos._cli_report import report_command

    report_command(trace, replays or [], out)


# -- chaos validate ------------------------------------------------------------------


@app.command("validate")
def validate(
    scenario: Annotated[
        str | None, typer.Argument(help="A built-in scenario (payments) or a folder.")
    ] = None,
    seeds: Annotated[int, typer.Option(help="Held-out seeds: golden must hold on each.")] = 20,
    first_seed: Annotated[
        int, typer.Option(help="The first held-out seed (far from the ones tuned on).")
    ] = 1000,
    replays: Annotated[
        int, typer.Option(help="Replays of each catching trace (95% must violate again).")
    ] = 20,
    out_dir: Annotated[
        Path | None,
        typer.Option(help="Trace folder (default traces/validate-SCENARIO; --all: DIR/SCENARIO)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON report object.")] = False,
    all_packs: Annotated[
        bool, typer.Option("--all", help="Validate every built-in pack, one after another.")
    ] = False,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    run_timeout: RunTimeoutOption = None,
    stress: Annotated[
        str | None,
        typer.Option(
            metavar="[N]",
            help="Run the golden's held-out seeds beside N busy-loop processes (CPU "
            "pressure); alone: 2 per CPU.",
        ),
    ] = None,
) -> None:
    """Validate a scenario: exit 0 valid, 1 a check failed, 2 bad input, 3 harness error."""
    from chaos._cli_validate import validate_command

    flags = _exec_flags(ray, ray_cpus, run_timeout)
    _exit_with(
        validate_command, scenario, seeds, first_seed, replays, out_dir, as_json, all_packs, flags,
        stress,
    )  # fmt: skip


# -- chaos search --------------------------------------------------------------------


@app.command("search")
def search(
    scenario: Annotated[str, typer.Argument(help="A built-in scenario (payments) or a folder.")],
    variant: Annotated[str, typer.Option(help="golden or a defective variant.")] = "golden",
    invariant: Annotated[
        str | None, typer.Option(help="Only a violation of this invariant counts (default: any).")
    ] = None,
    max_examples: Annotated[
        int, typer.Option(help="Runs to spend finding before giving up (a budget in runs).")
    ] = 200,
    max_shrinks: Annotated[int, typer.Option(help="Extra runs allowed for shrinking.")] = 40,
    seed: Annotated[
        int, typer.Option(help="Search and run seed: same --seed and --jobs, same search.")
    ] = 0,
    out: Annotated[
        Path | None,
        typer.Option(help="Minimal find's trace (default traces/search-SCENARIO-VARIANT.trace)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON result object.")] = False,
    space: Annotated[
        str,
        typer.Option(
            help="Fault space: variant (its own table) or golden (the pack's neutral one)."
        ),
    ] = "variant",
    resume: Annotated[
        Path | None,
        typer.Option(help="Keep shrinking the schedule of a trace an earlier search saved."),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            help="Runs side by side: schedules drawn per batch (fixed default, not the CPU "
            "count: the schedules tried depend on it)."
        ),
    ] = 8,
) -> None:
    """Search for a violating fault schedule: exit 1 found, 0 none, 2 bad input, 3 error."""
    from chaos._cli_search import search_command

    _exit_with(
        search_command,
        scenario,
        variant,
        invariant,
        max_examples,
        max_shrinks,
        seed,
        out,
        as_json,
        space,
        resume,
        jobs,
    )


# -- chaos sweep ---------------------------------------------------------------------


@app.command("sweep")
def sweep(
    scenario: Annotated[str, typer.Argument(help="A built-in scenario (payments) or a folder.")],
    seeds: Annotated[str, typer.Option(help="Seeds: N, A-B, or a comma-separated list.")],
    variant: Annotated[str, typer.Option(help="golden or a defective variant.")] = "golden",
    jobs: Annotated[
        int | None, typer.Option(help="Runs side by side (default: 4 per CPU, at most 64).")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option(help="Trace folder (default traces/sweep-SCENARIO-VARIANT).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON summary.")] = False,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    run_timeout: RunTimeoutOption = None,
) -> None:
    """Run a scenario over many seeds: exit 0 all held, 1 a violation, 2 bad input, 3 error."""
    from chaos._cli_sweep import sweep_command

    flags = _exec_flags(ray, ray_cpus, run_timeout)
    _exit_with(sweep_command, scenario, seeds, variant, jobs, out_dir, as_json, flags)


# -- chaos grade / chaos task ---------------------------------------------------------


@app.command("grade")
def grade(
    scenario: Annotated[str, typer.Argument(help="A built-in scenario (payments) or a folder.")],
    impl: Annotated[
        Path, typer.Option(help="The candidate: a .py file, an executable, or a folder.")
    ],
    public: Annotated[bool, typer.Option(help="Grade on the task's public seeds.")] = False,
    heldout_key: Annotated[
        Path | None,
        typer.Option(help="Key file of the held-out seeds (default: $CHAOS_HELDOUT_KEY_FILE)."),
    ] = None,
    heldout: Annotated[
        int | None, typer.Option(help="How many held-out seeds (default: the task's).")
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="These seeds instead: N, A-B or a comma-separated list.")
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="Runs side by side (default: half the CPUs, at least 1).")
    ] = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(help="A limit NAME=VALUE, e.g. cpu_s=30 (see docs/grading.md); repeatable."),
    ] = None,
    isolation: Annotated[
        str | None, typer.Option(help="root, uid or user (default: the strongest available).")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option(help="Where each grade's trace folder goes (default traces/).")
    ] = None,
    junit: Annotated[
        Path | None, typer.Option(help="Also write JUnit XML: one test case per seed x invariant.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON grade object.")] = False,
    sandbox: Annotated[
        str | None,
        typer.Option(help="process (default) or docker: the candidate in a container."),
    ] = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    run_timeout: RunTimeoutOption = None,
) -> None:
    """Grade a candidate: exit 0 every run held, 1 some did not, 2 bad input, 3 harness error."""
    from chaos._cli_grade import grade_command

    _exit_with(
        grade_command, scenario, impl, public, heldout_key, heldout, seeds, jobs, limit or [],
        isolation, out_dir, junit, as_json, sandbox, _exec_flags(ray, ray_cpus, run_timeout),
    )  # fmt: skip


@app.command("task")
def task(
    scenario: Annotated[str, typer.Argument(help="A built-in scenario (payments) or a folder.")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Folder to write (default task-SCENARIO).")
    ] = None,
    format: Annotated[
        str, typer.Option("--format", help="folder (for a candidate) or harbor (a Harbor task).")
    ] = "folder",
    heldout: Annotated[
        int | None, typer.Option(help="harbor: held-out seeds the verifier grades on.")
    ] = None,
    heldout_key: Annotated[
        Path | None, typer.Option(help="harbor: use this key (default: a fresh one).")
    ] = None,
) -> None:
    """Write a scenario's task: a folder a candidate works in, or a Harbor task."""
    from chaos._cli_task import task_command

    _exit_with(task_command, scenario, out, format, heldout, heldout_key)


# -- chaos gc -------------------------------------------------------------------------


@app.command("gc")
def gc(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Reap what dead runs left: processes, run dirs, shm files (every run does it first)."""
    from chaos._cli_gc import gc_command

    gc_command(as_json)


# -- entry point ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI; exit 0 on success, 2 on bad input, 3 on a harness error, 130/143/129
    when stopped by SIGINT/SIGTERM/SIGHUP. Without ``argv`` (the ``chaos`` program) the
    signals are handled (chaos._signals); called with ``argv`` (tests), Python's are kept."""
    if argv is None and not _signals.installed():
        _signals.install()
    try:
        command = typer.main.get_command(app)
        args = _optional_values(sys.argv[1:] if argv is None else argv)  # a bare --ray, --stress
        result = command.main(args=args, prog_name="chaos", standalone_mode=False)
        if _signals.installed() and _signals.received() is not None:
            raise _signals.Interrupted(_signals.received() or signal.SIGINT)
    except SystemExit:
        raise
    except BaseException as exc:
        if _signals.installed():
            _exit_if_stopped(exc)
        _fail_error(exc)
    if isinstance(result, int) and not isinstance(result, bool) and result:
        raise SystemExit(result)


def _looks_like_address(word: str) -> bool:
    return ":" in word or word in ("auto", "local")


#: Options whose value may be left out: option -> (the value it then means, what a following
#: word must look like to be its value). typer does not hand click an optional value, so
#: ``main`` fills it in: a bare ``--ray`` is ``--ray=local``, a bare ``--stress`` ``--stress
#: auto``. ``--ray=ADDRESS`` / ``--stress=N`` are always read as given.
OPTIONAL_VALUES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "--ray": ("local", _looks_like_address),
    "--stress": ("auto", str.isdigit),
}


def _optional_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with the default value filled in after an optional-value option given alone
    (last, before another option, or before a word that cannot be its value)."""
    out: list[str] = []
    args = list(argv)
    for index, arg in enumerate(args):
        if arg == "--":
            return out + args[index:]
        if arg in OPTIONAL_VALUES:
            default, is_value = OPTIONAL_VALUES[arg]
            following = args[index + 1] if index + 1 < len(args) else None
            if following is None or following.startswith("-") or not is_value(following):
                out.append(f"{arg}={default}")
                continue
        out.append(arg)
    return out


def _fail_error(exc: BaseException) -> NoReturn:
    """One line and the error's exit code for what ``main`` caught; anything else is a bug
    and propagates."""
    if isinstance(exc, typer.TyperException):  # a usage error (typer's base class of click's)
        if _is_no_args_help(exc):
            raise SystemExit(EXIT_BAD_INPUT) from None  # typer has printed the help
        _fail(exc.format_message(), exc.exit_code)
    if isinstance(exc, typer.Abort):
        _fail("aborted", EXIT_INTERRUPTED)
    if isinstance(exc, BaseExceptionGroup):
        _fail_group(exc)
    if isinstance(exc, ChaosError):
        _fail(str(exc), exit_code_for(exc))
    raise exc


def _fail_group(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    """An exception group from a nursery that holds only ChaosErrors fails like its first."""
    chaos, rest = group.split(ChaosError)
    if chaos is None or rest is not None:
        raise group
    first: BaseException = chaos
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    _fail(str(first), exit_code_for(first))


def _is_no_args_help(exc: typer.TyperException) -> bool:
    """The usage "error" of a command group called without a command: typer has printed its
    help. Recognised by name, as typer itself does (its class lives in a private module)."""
    return type(exc).__name__ == "NoArgsIsHelpError"
