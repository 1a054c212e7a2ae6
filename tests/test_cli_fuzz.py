"""Every command's options, fuzzed: whatever a user types, the command ends with exit 0, 1, 2
or 3, never a traceback, a refusal is at most one line, and nothing outside its output
paths changes.

The commands and their options are read from the CLI itself (the typer app, as click sees
it), so a new command or option is fuzzed without touching this file: values come from its
type (int, float, path, text, flag, repeatable), enriched by a few words the harness knows
(scenario names, seed ranges, limits) where an option's name matches.

The default suite runs the commands in this process with nothing started: the one runner
every command's work goes through (``ground._signals.run``) and the connection to a Ray
cluster are replaced by a stop, so an input that passes every check ends there (``started``)
in milliseconds. The slow variant runs ``python -m chaos`` for real, a few seconds each,
and stops what got past its checks with SIGTERM (exit 143, nothing left).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from typer.main import get_command

from chaos import cli
from ground import _signals
from tests.replay.report.samples import write_payments

ROOT = Path(__file__).resolve().parent.parent
STARTER = ROOT / "scenarios" / "payments" / "starter.py"


# -- the option table, read from the CLI -------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One parameter of a command, as click parses it."""

    name: str
    opts: tuple[str, ...]
    positional: bool
    kind: type  # int, float, bool, str, Path (anything else is fuzzed as text)
    flag: bool
    repeatable: bool  # a repeatable option, or a positional taking any number
    required: bool


def _kind(param: Any) -> type:
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if annotation is None:  # a click without typer's descriptors: its type's name
        name = getattr(getattr(param, "type", None), "name", "text")
        annotation = {"integer": int, "float": float, "boolean": bool, "path": Path}.get(name)
    return annotation if annotation in (int, float, bool, Path) else str


def option_table() -> dict[tuple[str, ...], tuple[Param, ...]]:
    """Every command (``("proxy", "serve")`` for a sub-command) and its parameters."""
    table: dict[tuple[str, ...], tuple[Param, ...]] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, (*path, name))
            if not command.params:  # a group's own options (chaos --version): fuzzed too
                return
        table[path] = tuple(
            Param(
                p.name,
                tuple(p.opts),
                p.param_type_name == "argument",
                _kind(p),
                bool(getattr(p, "is_flag", False)),
                bool(getattr(p, "multiple", False)) or p.nargs == -1,
                bool(p.required),
            )
            for p in command.params
        )

    walk(get_command(cli.app), ())
    return table


TABLE = option_table()


def test_the_option_table_is_the_clis() -> None:
    """The fuzz reaches every command (a group's too), each with its options."""
    assert {" ".join(c) for c in TABLE} >= {
        "run", "show", "replay", "report", "search", "validate", "sweep", "grade", "task",
        "gc", "proxy serve",
    }  # fmt: skip
    assert [p.opts for p in TABLE[()]] == [("--version",)]  # the program's own option
    run = {p.name: p for p in TABLE[("run",)]}
    assert (run["seed"].kind, run["out"].kind, run["as_json"].flag) == (int, Path, True)
    assert run["limit"].repeatable
    assert run["scenario"].positional
    assert run["scenario"].required


# -- values --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    """The files a fuzzed command may be pointed at (rebuilt for every example), and the
    folder its outputs may go to."""

    files: Path  # the sentinel tree: nothing in it may change but named outputs
    out: Path  # a folder for new outputs


#: Paths in the sentinel tree (relative), and other places, a path value is drawn from.
SENTINELS = ("good.trace", "text.txt", "folder", "folder/inner.txt", "fifo", "sock",
             "key", "open.key", "schedule.json", "bad.json", "null", "zero", "full")  # fmt: skip
ELSEWHERE = ("out/new.trace", "out/dir", "out/dir/new.html", "text.txt/under", "missing",
             "", ".", "/proc/x", "/nonexistent/dir/x")  # fmt: skip

#: Words the harness knows, for options whose name matches: a fuzz that reaches past the
#: first check. Any other option gets values from its type alone.
WORDS: dict[str, list[str]] = {
    "scenario": ["payments", "leases", "tenants", "payments_docker", "nosuch", "", "folder"],
    "variant": ["golden", "no-idempotency", "ack-before-commit", "bogus", ""],
    "invariant": ["exactly_once", "no_lost_messages", "bogus"],
    "seeds": ["0", "1-3", "3-1", "1,2,2", "x", "-1", str(2**64), "", "0-999999"],
    "limit": [
        "memory_mb=1000000000000000",
        "cpu_s=1",
        "bogus=1",
        "cpu_s=-1",
        "cpu_s=nan",
        "wall_s",
        "processes=2.5",
        "term_s=1e400",
    ],
    "isolation": ["root", "uid", "user", "bogus"],
    "sandbox": ["process", "docker", "bogus"],
    "format": ["folder", "harbor", "bogus"],
    "space": ["variant", "golden", "bogus"],
    "stress": ["auto", "1", "0", "9999", "x"],
    "ray": ["127.0.0.1:1", "ray://127.0.0.1:1", "auto", "local", "bogus", "h:99999"],
    "postgres_dsn": ["", "notadsn", "postgresql://u:p@127.0.0.1:1/db", "postgresql://h:99999/d"],
    "nats_url": ["", "nats://127.0.0.1:1", "http://x", "nats://h:0", "nats://"],
    "host": ["127.0.0.1", "localhost", "example.com", "::1", "999.1.1.1"],
    "impl": ["starter"],
}


def _mostly(usual: st.SearchStrategy[str], odd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``usual`` three times in four, ``odd`` otherwise: most command lines get past the
    first check and reach the next one."""
    return st.integers(0, 3).flatmap(lambda n: odd if n == 0 else usual)


def _texts(name: str) -> st.SearchStrategy[str]:
    words = WORDS.get(name, [])
    # (no NUL: a command line cannot hold one)
    alphabet = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\0")
    anything = st.text(alphabet, max_size=12)
    return _mostly(st.sampled_from(words), anything) if words else anything


def _ints() -> st.SearchStrategy[str]:
    edges = [0, 1, -1, 2, 7, 64, 65, 1000, 65535, 65536, 2**63 - 1, 2**63, 10**15]
    return _mostly(st.integers(1, 5).map(str), st.sampled_from([str(e) for e in edges]))


def _floats() -> st.SearchStrategy[str]:
    edges = ["0", "-1", "0.5", "1e300", "nan", "inf", "-inf", "1e-9", "86400", "x"]
    return _mostly(st.floats(0.1, 100).map(repr), st.sampled_from(edges))


def _paths(output: bool) -> st.SearchStrategy[str]:
    """An output: usually a new path; an input: usually one of the sentinels (a trace)."""
    anywhere = st.sampled_from([f"{{files}}/{p}" for p in SENTINELS] + list(ELSEWHERE))
    if output:
        return _mostly(st.sampled_from(["out/new.trace", "out/dir", "out/dir/new.html"]), anywhere)
    return _mostly(st.sampled_from(["{files}/good.trace", "{files}/schedule.json"]), anywhere)


#: The options whose value is where the command writes (its out-dir, in the issue's words).
OUTPUTS = {"out", "out_dir", "junit"}


def values(param: Param) -> st.SearchStrategy[str]:
    """What a user might type for ``param``: from its type, and the harness's words."""
    if param.name in WORDS and param.kind is not Path:
        return _texts(param.name)
    if param.name in WORDS:  # a path the harness knows (the starter program)
        return _mostly(st.just("{starter}"), _paths(output=False))
    if param.kind is Path:
        return _paths(output=param.name in OUTPUTS)
    by_kind = {int: _ints, float: _floats}
    strategy = by_kind.get(param.kind, lambda: _texts(param.name))()
    return strategy | _texts("") if param.kind is not str else strategy


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """``chaos COMMAND ...``: its required parameters (usually), a few of its options, now
    and then a word that is no option at all."""
    command = draw(st.sampled_from(sorted(TABLE)))  # () is the chaos program's own options
    argv = list(command)
    for param in TABLE[command]:
        wanted = param.required and draw(st.integers(0, 9)) > 0
        if not wanted and not draw(st.integers(0, 3)) == 0:
            continue
        repeats = draw(st.integers(1, 2)) if param.repeatable else 1
        for _ in range(repeats):
            if param.positional:
                argv.append(draw(values(param)))
            elif param.flag:
                argv.append(draw(st.sampled_from(param.opts)))
            else:
                argv += [draw(st.sampled_from(param.opts)), draw(values(param))]
    if draw(st.integers(0, 15)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(
            ["--bogus", "--help", "-x", "--", "--seed"])))  # fmt: skip
    return argv


# -- the sentinel tree ---------------------------------------------------------------------------


@contextlib.contextmanager
def sandbox() -> Iterator[Sandbox]:
    """A fresh sentinel tree and an output folder, removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="chaos-fuzz-"))
    files, out = top / "files", top / "out"
    files.mkdir()
    out.mkdir()
    write_payments(files / "good.trace")
    (files / "text.txt").write_text("not a trace\n")
    (files / "folder").mkdir()
    (files / "folder" / "inner.txt").write_text("inner\n")
    os.mkfifo(files / "fifo")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(files / "sock"))
    for name, mode in (("key", 0o600), ("open.key", 0o644)):
        (files / name).write_text("0123456789abcdef0123456789abcdef\n")
        (files / name).chmod(mode)
    (files / "schedule.json").write_text('{"seed": 1, "space_hash": "sha256:x", "events": []}')
    (files / "bad.json").write_text('{"seed": 1, "space_hash": "sha256:x"}')
    if os.geteuid() == 0:  # clones of /dev/null, /dev/zero, /dev/full: never the real ones
        for name, minor in (("null", 3), ("zero", 5), ("full", 7)):
            os.mknod(files / name, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    try:
        yield Sandbox(files, out)
    finally:
        listener.close()
        shutil.rmtree(top, ignore_errors=True)


def fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root``: its type and mode, its device, a hash of its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        st_ = path.lstat()
        digest = ""
        if stat.S_ISREG(st_.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        found[str(path.relative_to(root))] = (st_.st_mode, st_.st_rdev, digest)
    return found


def outputs_of(argv: list[str], files: Path) -> set[str]:
    """The sentinel paths (relative) the command may write: output option values, their
    ``.partial``, what goes under an out-dir, and a report's default page beside its trace."""
    command = next(
        (c for c in sorted(TABLE, key=len, reverse=True) if argv[: len(c)] == list(c)), ()
    )
    opts = {o: p for p in TABLE.get(command, ()) for o in p.opts if p.name in OUTPUTS}
    named = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in opts]
    allowed = set()
    for value in named:
        if value.startswith(str(files) + "/"):
            rel = value[len(str(files)) + 1 :]
            allowed |= {rel, f"{rel}.partial"}
    if command == ("report",):
        allowed |= {"good.report.html"}
    return allowed


# -- in this process: nothing starts ---------------------------------------------------------


class Started(BaseException):
    """The command got past every check: its work would start here."""


def _started(*args: object, **kwargs: object) -> Any:
    raise Started


@dataclass
class Outcome:
    code: int | None  # None: it got past its checks (Started)
    stderr: str


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    capsys.readouterr()
    try:
        code: int | None = cli.run_cli(argv)
    except Started:
        code = None
    return Outcome(code, capsys.readouterr().err)


def check(argv: list[str], outcome: Outcome, box: Sandbox, before: dict[str, Any]) -> None:
    assert outcome.code in (None, 0, 1, 2, 3), (argv, outcome)
    assert "Traceback" not in outcome.stderr, (argv, outcome.stderr)
    if outcome.code == 2:
        assert outcome.stderr.count("\n") <= 1, (argv, outcome.stderr)
    allowed = outputs_of(argv, box.files)
    after = fingerprint(box.files)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed <= allowed | {
        k for k in changed if any(k.startswith(a + "/") for a in allowed)
    }, (argv, changed)


def _concrete(argv: list[str], box: Sandbox) -> list[str]:
    words = {"files": str(box.files), "starter": str(STARTER)}
    out = []
    for arg in argv:
        for key, value in words.items():  # only these: a fuzzed word may hold any brace
            arg = arg.replace("{" + key + "}", value)
        if arg.startswith("out/"):
            arg = str(box.out / arg.removeprefix("out/"))
        out.append(arg)
    return out


@settings(
    max_examples=800,
    deadline=None,
    derandomize=True,  # the same examples every run: a CI failure reproduces
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(argv=command_lines())
def test_every_option_fails_in_one_line_or_gets_past_its_checks(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(_signals, "run", _started)
    monkeypatch.setattr("chaos.executor_ray.connect", _started)
    with sandbox() as box, contextlib.chdir(tmp_path):
        runs, registry = tmp_path / "runs", tmp_path / "registry"
        runs.mkdir(exist_ok=True)
        monkeypatch.setenv("CHAOS_RUN_DIR", str(runs))
        monkeypatch.setenv("CHAOS_REGISTRY_DIR", str(registry))
        argv = _concrete(argv, box)
        before = fingerprint(box.files)
        outcome = run_in_process(argv, capsys)
        said = "past its checks" if outcome.code is None else outcome.code
        event(f"{argv[0] if argv else '(none)'}: {said}")
        check(argv, outcome, box, before)
        assert list(runs.iterdir()) == [], argv  # nothing it began is left
        assert not [p for p in registry.glob("*.run")], argv


# -- the chaos program, for real -----------------------------------------------------------------


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(argv=command_lines())
def test_the_chaos_program_under_fuzz(argv: list[str], tmp_path: Path) -> None:
    """As a user runs it: a separate process, every service real. What got past its checks
    runs for a few seconds and is stopped by SIGTERM: 143, one line, nothing left. (Not
    with --ray: a local Ray instance costs a gigabyte and ten seconds; tests/ray has it.)"""
    assume(not any(a.startswith("--ray") for a in argv))
    with sandbox() as box:
        argv = _concrete(argv, box)
        work = Path(tempfile.mkdtemp(prefix="chaos-fuzz-cwd-", dir=tmp_path))
        env = {**os.environ, "CHAOS_REGISTRY_DIR": str(work / "registry"), "COLUMNS": "200"}
        before = fingerprint(box.files)
        child = subprocess.Popen(
            [sys.executable, "-m", "chaos", *argv], cwd=work, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = child.communicate(timeout=4)
            stopped = False
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)
            _, err = child.communicate(timeout=60)
            stopped = True
        stderr = err.decode(errors="replace")
        name = argv[0] if argv else "(none)"
        event(f"{name}: exit {child.returncode}{' at SIGTERM' if stopped else ''}")
        if stopped and child.returncode == 128 + signal.SIGTERM:
            assert "Traceback" not in stderr, (argv, stderr)
            assert stderr.splitlines()[-1].startswith("chaos: error: terminated (SIGTERM)")
        else:
            check(argv, Outcome(child.returncode, stderr), box, before)
        assert not list((work / "registry").glob("*.run")), (argv, "a registration is left")
