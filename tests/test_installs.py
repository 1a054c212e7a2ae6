"""Any install grades correctly: each way of installing the harness, as root and not.

Each kind below installs this project (a copy of it, from a wheelhouse built once: no
download per kind) into an interpreter whose own site holds none of its packages (Debian's
``/usr/bin/python3`` where it can make virtualenvs, so an environment that leaks into the
candidate is seen failing, not masked), then grades every pack with a task from it at the
default isolation: its golden as ``chaos task --format harbor`` bundles it (``solution/``),
which must get 1.0, its starter, which must get 0, and (payments) a consumer written from
the task folder alone that imports nats-py and psycopg as installed for it, not bundled
(``grading/candidates/payments_from_spec.py``), which must get 1.0. One seed each; the
starters under a 20 s wall clock (a starter never settles: it would wait out the settle
timeout; contained at the limit, it is a 0 all the same). Every grade of every kind runs
side by side, six at a time.

| kind | what |
|---|---|
| venv-tmp | ``python3 -m venv`` (symlinked) in /tmp, ``pip install -e`` |
| venv-copies-opt | ``python3 -m venv --copies`` in /opt, ``pip install`` (not editable) |
| venv-root | a venv in /root (closed to other users), not editable; also graded at uid isolation |
| venv-in-project | ``.venv`` inside the project's folder, editable |
| user-site | ``pip install --user`` (``PYTHONUSERBASE``) into the system interpreter |
| python-in-tmp | an interpreter under /tmp (as a conda environment may be): a venv of it (2) |
| system | ``pip install`` into the system interpreter's own site (1) |
| non-root | a venv of a user made for the test (``useradd``), who grades: user isolation |

(1) Private mount namespaces bind two folders of the test's over the interpreter's site and
scripts folders (``/usr/local/lib/python3.X/dist-packages``, ``/usr/local/bin``): pip writes
there, the grades run there, the machine's own stay untouched.
(2) The base's binary and standard library, hard-linked: the sandbox's /tmp is its own, and
the interpreter is bound inside it.

Needs root (useradd, /opt, /root, mount namespaces): CI runs it as root; elsewhere it says so
and skips.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from chaos.scenario import load_scenario
from chaos.task import bundle_program
from tests.grading.conftest import CANDIDATES, leftovers

ROOT = Path(__file__).resolve().parents[1]
PACKS = ("payments", "tenants", "leases")
USER = "chaos-install-test"
STARTER_WALL_S = 20
_SOURCES = ("ground", "chaos", "faults", "replay", "invariants", "scenarios")
_SOURCES += ("pyproject.toml", "README.md")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="builds installs in /opt and /root and makes a user: needs root (CI has it)",
    ),
]


def _base_python() -> str:
    """An interpreter whose own site has none of the project's packages, if there is one."""
    for python in ("/usr/bin/python3", sys.executable):
        probe = "import venv, ensurepip\ntry:\n import nats\nexcept ImportError: pass\n" \
                "else: raise SystemExit(1)"  # fmt: skip
        if Path(python).exists() and subprocess.run([python, "-c", probe]).returncode == 0:
            return python
    return sys.executable


def _run(*argv: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
    return done


@dataclass
class Install:
    """One install of the harness: how to run its ``chaos``."""

    kind: str
    python: str
    env: dict[str, str] = field(default_factory=dict)
    #: A command prefix (another user, a mount namespace).
    wrap: list[str] = field(default_factory=list)
    user: str | None = None

    def command(self, *args: str | Path) -> list[str]:
        return [*self.wrap, self.python, "-m", "chaos", *(str(a) for a in args)]


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    """A folder every user can read (pytest's own tmp is root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="chaos-installs-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def project(workspace: Path) -> Path:
    """A copy of this project's sources (what an install installs)."""
    copy = workspace / "project"
    copy.mkdir()
    for name in _SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
        else:
            shutil.copyfile(source, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheelhouse(workspace: Path, project: Path) -> Path:
    """The project's wheel, every wheel it needs and the build backend: each install below
    takes them from here (``--no-index``)."""
    wheels = workspace / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "-q", "-w", wheels, project, "setuptools>=77",
         "wheel")  # fmt: skip
    return wheels


def _pip(python: str, wheels: Path, *args: str | Path, wrap: list[str] | None = None,
         **kwargs: Any) -> None:  # fmt: skip
    _run(*(wrap or []), python, "-m", "pip", "install", "-q", "--no-index", "--find-links",
         wheels, *args, **kwargs)  # fmt: skip


def _venv(base: str, where: Path, wheels: Path, target: str | Path, *flags: str) -> str:
    _run(base, "-m", "venv", *flags, where)
    python = str(where / "bin" / "python")
    editable = ["-e"] if target != "chaos-harness" else []
    _pip(python, wheels, *editable, target)
    return python


@pytest.fixture(scope="module")
def nonroot_user() -> Iterator[str]:
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        _run("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER)
        made = True
    yield USER
    if made:
        subprocess.run(["userdel", USER], capture_output=True, check=False)


@pytest.fixture(scope="module")
def installs(
    workspace: Path, project: Path, wheelhouse: Path, nonroot_user: str
) -> Iterator[dict[str, Install]]:
    base = _base_python()
    made: list[Path] = []
    found: dict[str, Install] = {}

    def folder(parent: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix="chaos-install-", dir=parent))
        made.append(path)
        return path

    found["venv-tmp"] = Install(
        "venv-tmp", _venv(base, workspace / "venv-tmp", wheelhouse, project)
    )
    found["venv-copies-opt"] = Install(
        "venv-copies-opt",
        _venv(base, folder("/opt") / "venv", wheelhouse, "chaos-harness", "--copies"),
    )
    found["venv-root"] = Install(
        "venv-root", _venv(base, folder("/root") / "venv", wheelhouse, "chaos-harness")
    )
    found["venv-in-project"] = Install(
        "venv-in-project", _venv(base, project / ".venv", wheelhouse, project)
    )
    userbase = workspace / "userbase"
    user_env = {"PYTHONUSERBASE": str(userbase)}
    _pip(base, wheelhouse, "--user", "--break-system-packages", "chaos-harness",
         env={**os.environ, **user_env})  # fmt: skip
    found["user-site"] = Install("user-site", base, env=user_env)
    found.update(_system_install(base, workspace, wheelhouse))
    found.update(_python_in_tmp(base, workspace, wheelhouse))
    home = workspace / "home"
    home.mkdir()
    venv = home / "venv"
    python = _venv(base, venv, wheelhouse, project)
    _run("chown", "-R", f"{nonroot_user}:", home)
    found["non-root"] = Install(
        "non-root", python, env={"HOME": str(home)},
        wrap=["runuser", "-m", "-u", nonroot_user, "--"], user=nonroot_user,
    )  # fmt: skip
    yield found
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _system_install(base: str, workspace: Path, wheels: Path) -> dict[str, Install]:
    """The project in the system interpreter's own site and scripts folders, as ``sudo pip
    install`` puts it, seen only inside private mount namespaces that bind two folders of the
    workspace over them (the machine's are never written)."""
    where = subprocess.run(
        [base, "-c", "import sysconfig; print(sysconfig.get_path('purelib')); "
                     "print(sysconfig.get_path('scripts'))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not all(Path(p).is_dir() for p in where) or shutil.which("unshare") is None:
        return {}
    binds = []
    for name, target in zip(("system-site", "system-scripts"), where, strict=True):
        (workspace / name).mkdir(mode=0o755)
        binds.append(f'mount --bind "{workspace / name}" "{target}"')
    script = " && ".join([*binds, 'exec "$@"'])
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    _pip(base, wheels, "--break-system-packages", "chaos-harness",
         wrap=wrap)  # fmt: skip
    return {"system": Install("system", base, wrap=wrap)}


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _python_in_tmp(base: str, workspace: Path, wheels: Path) -> dict[str, Install]:
    """An interpreter whose prefix is under /tmp, where the sandbox puts its own /tmp: the
    base's binary and standard library, hard-linked (a binary that loads a libpython of its
    prefix's would need that prefix: not this kind)."""
    executable, stdlib = subprocess.run(
        [base, "-c", "import os, sys, sysconfig; print(os.path.realpath(sys.executable)); "
                     "print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    linked = subprocess.run(["ldd", executable], capture_output=True, text=True).stdout
    if "libpython" in linked:
        return {}
    prefix = workspace / "python"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(executable, prefix / "bin" / Path(executable).name)
    shutil.copytree(stdlib, prefix / "lib" / Path(stdlib).name, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns("site-packages", "dist-packages"))  # fmt: skip
    python = str(prefix / "bin" / Path(executable).name)
    venv = _venv(python, workspace / "venv-of-python-in-tmp", wheels, "chaos-harness")
    return {"python-in-tmp": Install("python-in-tmp", venv)}


@pytest.fixture(scope="module")
def programs(workspace: Path) -> dict[tuple[str, str], Path]:
    """(pack, golden|starter) -> the program, where every user can read it."""
    found = {}
    for name in PACKS:
        scenario = load_scenario(name)
        assert scenario.task is not None
        found[(name, "golden")] = bundle_program(scenario, workspace / "programs" / name)
        starter = workspace / "programs" / f"{name}-starter.py"
        shutil.copyfile(scenario.path / scenario.task.starter, starter)
        found[(name, "starter")] = starter
    found[("payments", "from-spec")] = workspace / "programs" / "payments_from_spec.py"
    shutil.copyfile(CANDIDATES / "payments_from_spec.py", found[("payments", "from-spec")])
    for path in (workspace / "programs").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return found


def _grade(install: Install, pack: str, program: Path, out: Path, *extra: str) -> dict[str, Any]:
    out.mkdir(parents=True)
    if install.user is not None:
        shutil.chown(out, install.user)
    argv = install.command("grade", pack, "--impl", program, "--seeds", "0", "--json",
                           "--out-dir", out, *extra)  # fmt: skip
    # nothing of this process's environment that would point Python elsewhere
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(argv, capture_output=True, text=True, cwd=out, timeout=900,
                          env={**env, **install.env})  # fmt: skip
    if done.returncode not in (0, 1):
        return {"exit_code": done.returncode, "stderr": done.stderr[-3000:]}
    return {**json.loads(done.stdout), "exit_code": done.returncode}


KINDS = ("venv-tmp", "venv-copies-opt", "venv-root", "venv-in-project", "user-site",
         "python-in-tmp", "system", "non-root")  # fmt: skip
CASES = [(kind, pack, what) for kind in KINDS for pack in PACKS for what in ("golden", "starter")]
CASES += [(kind, "payments", "from-spec") for kind in KINDS]


@pytest.fixture(scope="module")
def grades(
    installs: dict[str, Install], programs: dict[tuple[str, str], Path], workspace: Path
) -> tuple[dict[tuple[str, ...], dict[str, Any]], list[str]]:
    """Every case graded (six at a time), and what was left once all were done."""
    jobs: dict[tuple[str, ...], tuple[Install, str, Path, list[str]]] = {}
    for kind, pack, what in CASES:
        if kind in installs:
            extra = ["--limit", f"wall_s={STARTER_WALL_S}"] if what == "starter" else []
            jobs[(kind, pack, what)] = (installs[kind], pack, programs[(pack, what)], extra)
    # the closed venv at uid isolation: its libraries are copied into the candidate's box
    jobs[("venv-root", "payments", "golden", "uid")] = (
        installs["venv-root"], "payments", programs[("payments", "golden")],
        ["--isolation", "uid"],
    )  # fmt: skip
    with ThreadPoolExecutor(6) as pool:
        futures = {
            case: pool.submit(_grade, install, pack, program,
                              workspace / "grades" / "-".join(case), *extra)
            for case, (install, pack, program, extra) in jobs.items()
        }  # fmt: skip
        results = {case: future.result() for case, future in futures.items()}
    return results, leftovers()


def _case(grades: tuple[dict[tuple[str, ...], dict[str, Any]], list[str]], *case: str
          ) -> dict[str, Any]:  # fmt: skip
    results, _ = grades
    if case not in results:
        pytest.skip(f"install kind {case[0]} is not possible on this machine")
    return results[case]


@pytest.mark.parametrize(("kind", "pack"), [(k, p) for k, p, w in CASES if w == "golden"])
def test_the_golden_gets_1(
    grades: tuple[dict[tuple[str, ...], dict[str, Any]], list[str]], kind: str, pack: str
) -> None:
    result = _case(grades, kind, pack, "golden")
    assert result["exit_code"] == 0, result
    assert result["reward"] == 1.0, result["seeds"]
    expected = "user" if kind == "non-root" else "root"
    assert result["isolation"] == expected


@pytest.mark.parametrize(("kind", "pack"), [(k, p) for k, p, w in CASES if w == "starter"])
def test_the_starter_gets_0(
    grades: tuple[dict[tuple[str, ...], dict[str, Any]], list[str]], kind: str, pack: str
) -> None:
    result = _case(grades, kind, pack, "starter")
    assert result["exit_code"] == 1, result
    assert result["reward"] == 0.0
    assert result["errors"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_consumer_written_from_the_spec_imports_the_installed_libraries_and_gets_1(
    grades: tuple[dict[tuple[str, ...], dict[str, Any]], list[str]], kind: str
) -> None:
    result = _case(grades, kind, "payments", "from-spec")
    assert result["exit_code"] == 0, result
    assert result["reward"] == 1.0, result["seeds"]


def test_a_venv_closed_to_other_users_grades_at_uid_isolation(
    grades: tuple[dict[tuple[str, ...], dict[str, Any]], list[str]],
) -> None:
    result = _case(grades, "venv-root", "payments", "golden", "uid")
    assert result["exit_code"] == 0, result
    assert result["reward"] == 1.0
    assert result["isolation"] == "uid"


def test_nothing_is_left_behind(
    grades: tuple[dict[tuple[str, ...], dict[str, Any]], list[str]],
) -> None:
    _, left = grades
    assert left == []
