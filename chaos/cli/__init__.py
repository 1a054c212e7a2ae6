"""The ``chaos`` command line: one typer app, one sub-app or command per concept.

Adding a command: define it on ``app`` (``@app.command("run")``) or on a sub-app, hand its
body to ``_command(body, *args, runs=...)`` (the one runner every command goes through),
check its paths with ``ground._paths``, raise ``ConfigError`` for bad input (exit 2) and let
other ``ChaosError`` propagate (exit 3); call ``_fail(message, code)`` for any other one-line
failure. ``run_cli`` turns every error, usage errors included, into one ``chaos: error:
<message>`` line on stderr, never a traceback (a bug: one line, exit 3). A new command is
fuzzed (tests/test_cli_fuzz.py) and must get its signal test (tests/test_signal_commands.py)::

    chaos --version
    chaos proxy serve [--host 127.0.0.1] [--port 8474] [--seed N] [--dial-timeout S]
    chaos gc [--json]

Signals (the ``chaos`` program): SIGINT, SIGTERM and SIGHUP stop a command after its cleanup
with exit 130, 143 and 129 and one line (ground._signals.run_program decides the exit once).

Size (about 570 lines): one module because it is the app itself, every command's options and
help in one place (the fuzz test reads its option table from here); each command's body is a
module of its own.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, NoReturn

import trio
import typer

from chaos.cli._argv import _optional_values
from chaos.cli._exits import _code_for, _exit_code, _fail
from faults.proxy.errors import ProxyAPIError
from ground import _signals
from ground.errors import ConfigError

app = typer.Typer(
    name="chaos",
    help="Fault-injection chaos harness with deterministic replay.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
proxy_app = typer.Typer(help="The embedded Toxiproxy-compatible proxy.", no_args_is_help=True)
app.add_typer(proxy_app, name="proxy")


# The executor flags of the batch commands (sweep, validate, grade): chaos.cli._exec.
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
    from chaos.cli._exec import ExecFlags

    return ExecFlags(ray, ray_cpus, run_timeout)


#: What the one line of a command stopped by a signal adds: a command that starts runs, and
#: one that does not (show, report, task, gc, proxy serve).
RUNS_STOPPED = "every process, proxy and temp dir of the run was removed"
STOPPED = "stopped; nothing half-written was left"


def _command(command: Callable[..., object], *args: Any, runs: bool = True) -> NoReturn:
    """Every command's body goes through here: exit with its code (None: 0). A command that
    starts runs (``runs``) first reaps the stale registrations of dead runs. Ctrl-C, SIGTERM
    and SIGHUP (alone or grouped by a nursery) become one line and exit 130/143/129 in
    ``run_cli`` (ground._signals): the runs have removed what they started."""
    _signals.set_stop_note(RUNS_STOPPED if runs else STOPPED)
    if runs:
        from chaos.services.registry import collect_quietly

        collect_quietly()
    code = command(*args)
    raise SystemExit(code if isinstance(code, int) else 0)


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
    """Serve the Toxiproxy v2 HTTP API (a drop-in Toxiproxy) until Ctrl-C (exit 130)."""
    if not dial_timeout > 0:
        raise ConfigError(f"dial timeout must be > 0, got {dial_timeout}")
    if not 0 <= busy_poll_us <= 1_000_000:
        raise ConfigError(f"busy poll must be between 0 and 1000000 µs, got {busy_poll_us}")
    logging.basicConfig(level=logging.WARNING, format="chaos: %(name)s: %(message)s")
    _command(_serve, host, port, seed, dial_timeout, busy_poll_us, runs=False)


def _serve(host: str, port: int, seed: int, dial_timeout: float, busy_poll_us: float) -> None:
    """Serve until a signal stops the command (exit 128+N, every proxy closed)."""
    try:
        _signals.run(_serve_proxy, host, port, seed, dial_timeout, busy_poll_us)
    except ProxyAPIError as exc:  # the port is taken, or the host is not bindable
        _fail(exc.message, 2)


async def _serve_proxy(
    host: str, port: int, seed: int, dial_timeout: float, busy_poll_us: float
) -> None:
    from faults.proxy.http import open_toxiproxy

    async with open_toxiproxy(
        host, port, seed, dial_timeout=dial_timeout, busy_poll_us=busy_poll_us
    ) as (_, url):
        print(f"chaos proxy: Toxiproxy API on {url} (seed {seed})", flush=True)
        await trio.sleep_forever()


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
    from chaos.cli._run import run_command

    graded = (impl, limit or [], isolation, hide or [], sandbox)
    _command(
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
    from chaos.cli._run import show_command

    _command(show_command, trace, faults_only, ops_only, since, until, runs=False)


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
    from chaos.cli._replay import replay_command

    _command(replay_command, trace, times, as_json, strict, scenario, stress)


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
    from chaos.cli._report import report_command

    _command(report_command, trace, replays or [], out, runs=False)


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
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Runs side by side on warm workers (default: 1 per CPU, at most 64; 1: one "
            "at a time in this process; --stress: 1)."
        ),
    ] = None,
) -> None:
    """Validate a scenario: exit 0 valid, 1 a check failed, 2 bad input, 3 harness error."""
    from chaos.cli._validate import validate_command

    flags = _exec_flags(ray, ray_cpus, run_timeout)
    _command(
        validate_command, scenario, seeds, first_seed, replays, out_dir, as_json, all_packs, flags,
        stress, jobs,
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
    replays: Annotated[
        int,
        typer.Option(
            help="Replays of the shrunk witness (0-50; 0: none): 4 of 5 (80%) must violate "
            "again, else up to 3 schedules of the shrink path are tried, else it is racy."
        ),
    ] = 5,
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
        int | None,
        typer.Option(
            help="Runs side by side: schedules drawn per batch (default: 2 per CPU, at most "
            "64; the schedules tried depend on it, so the search prints the one it used)."
        ),
    ] = None,
) -> None:
    """Search for a violating fault schedule: exit 1 found, 0 none, 2 bad input, 3 error."""
    from chaos.cli._search import search_command

    _command(
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
        replays,
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
    from chaos.cli._sweep import sweep_command

    flags = _exec_flags(ray, ray_cpus, run_timeout)
    _command(sweep_command, scenario, seeds, variant, jobs, out_dir, as_json, flags)


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
    from chaos.cli._grade import grade_command

    _command(
        grade_command, scenario, impl, public, heldout_key, heldout, seeds, jobs, limit or [],
        isolation, out_dir, junit, as_json, sandbox, _exec_flags(ray, ray_cpus, run_timeout),
    )  # fmt: skip


@app.command("new")
def new(
    pack: Annotated[str, typer.Argument(help="The new pack's name (its id), e.g. outbox.")],
    folder: Annotated[
        Path | None, typer.Argument(help="Where to write it (default ./PACK; new or empty).")
    ] = None,
) -> None:
    """Write a minimal working pack to start from: exit 0, 2 bad name or folder not empty."""
    from chaos.cli._new import new_command

    _command(new_command, pack, folder, runs=False)


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
    from chaos.cli._task import task_command

    _command(task_command, scenario, out, format, heldout, heldout_key, runs=False)


# -- chaos gc -------------------------------------------------------------------------


@app.command("gc")
def gc(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Reap what dead runs left: processes, run dirs, shm files (every run does it first)."""
    from chaos.cli._gc import gc_command

    _command(gc_command, as_json, runs=False)


# -- entry point ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI; exit 0 on success, 2 on bad input, 3 on a harness error, 130/143/129
    when stopped by SIGINT/SIGTERM/SIGHUP. Without ``argv`` (the ``chaos`` program) the
    signals are handled (ground._signals); called with ``argv`` (tests), Python's are kept."""
    if argv is None:
        _signals.run_program(run_cli)
    code = run_cli(argv)
    if code:  # (0: return, as a test calling main expects)
        raise SystemExit(code)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run the CLI once and return its exit code; a failure is one ``chaos: error:`` line on
    stderr. ``argv`` None: the ``chaos`` program's own arguments, and an unexpected error
    (a harness bug) is one line too, exit 3; with ``argv`` (tests) it propagates."""
    try:
        command = typer.main.get_command(app)
        args = _optional_values(sys.argv[1:] if argv is None else argv)  # a bare --ray, --stress
        result = command.main(args=args, prog_name="chaos", standalone_mode=False)
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:
        return _code_for(exc, program=argv is None)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
