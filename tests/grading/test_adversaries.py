"""The red-team corpus: every program of ``adversaries/`` graded for real, at the default
isolation, against the reward its header says it must get (docs/grading.md, "Threat model").

Each adversary's docstring ends with what is expected of it, one ``key: value`` a line::

    pack: payments          the pack it is graded as (its task's service)
    golden: yes             the pack's golden program is bundled beside it (``golden/``)
    seeds: 2, 25            the seeds it is graded on (default: the pack's SEED)
    reward: 0               the exact reward it must get (or ``below 1``)
    unreadable: TEXT        each failed seed failed unreadable, saying TEXT
    fails: INVARIANT        that invariant failed on every failed seed
    probes: refused         it printed PROBE lines, every one of them "refused"
    absent: TEXT            no history operation's value holds TEXT (forged evidence)
    trace_mb: N             each seed's trace is at most N MB (a flood the harness records)

An adversary is a folder the test builds: the program as ``main.py``, ``_probe.py`` beside
it (shared attack steps), and ``golden/`` when asked. Every pack's golden (1.0) and starter
(0) are graded in the same batch; then nothing may be left on the host: no process,
sandbox folder, mount or cgroup of a candidate, and no file an adversary meant to create
from inside the database server (``/tmp/chaos-adversary-*``).

The grades share one pool of three warm workers (``chaos.grade_pool``): each adversary's
runs go to kept servers after other adversaries' runs, and must find nothing of them.

Several minutes on a 2-core machine: most adversaries run the golden, and those that hold
a lock or never settle wait out the settle timeout and the reader's lock timeout.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
import trio

from chaos.grade_pool import GradePool
from chaos.grading import Grade, GradeOptions, choose_seeds, run_grade
from chaos.sandbox.candidate import Program
from chaos.sandbox.process import default_isolation
from chaos.scenario import load_scenario
from chaos.task import bundle_program
from replay.trace import read_trace
from tests.grading.conftest import leftovers

HERE = Path(__file__).resolve().parent / "adversaries"
#: A seed per pack on which the golden holds quickly (payments: a redelivery of one order).
SEED = {"payments": 2, "tenants": 2, "leases": 4}
MARKERS = "chaos-adversary-"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(default_isolation() != "root", reason="the corpus runs at root isolation"),
]


@dataclass(frozen=True)
class Expect:
    pack: str
    golden: bool = False
    seeds: tuple[int, ...] = ()
    reward: str = "0"
    unreadable: str | None = None
    fails: str | None = None
    probes: bool = False
    absent: str | None = None
    trace_mb: float | None = None


def expectations(program: Path) -> Expect:
    """The ``key: value`` lines of the program's docstring."""
    doc = program.read_text().split('"""')[1]
    keys = "|".join(f.name for f in fields(Expect) if f.name != "extra")
    found = dict(re.findall(rf"^({keys}): (.+)$", doc, re.M))
    pack = found.pop("pack")
    seeds = found.pop("seeds", str(SEED[pack]))
    return Expect(
        pack=pack,
        golden=found.pop("golden", "no") == "yes",
        seeds=tuple(int(s) for s in seeds.split(",")),
        reward=found.pop("reward", "0"),
        unreadable=found.pop("unreadable", None),
        fails=found.pop("fails", None),
        probes=found.pop("probes", "") == "refused",
        absent=found.pop("absent", None),
        trace_mb=float(found.pop("trace_mb")) if "trace_mb" in found else None,
    )


ADVERSARIES = {p.stem: p for p in sorted(HERE.glob("*.py")) if not p.name.startswith("_")}


def build(name: str, program: Path, expect: Expect, tmp: Path) -> Path:
    """The adversary as a candidate folder: main.py, _probe.py, golden/ if asked."""
    out = tmp / name
    out.mkdir()
    shutil.copyfile(program, out / "main.py")
    shutil.copyfile(HERE / "_probe.py", out / "_probe.py")
    if expect.golden:
        bundle_program(load_scenario(expect.pack), out / "golden")
    return out


@dataclass
class Corpus:
    grades: dict[str, Grade]
    expects: dict[str, Expect]
    left: list[str]
    markers: list[str]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    tmp = tmp_path_factory.mktemp("adversaries")
    jobs: dict[str, tuple[Path, str, tuple[int, ...]]] = {}
    expects: dict[str, Expect] = {}
    for name, program in ADVERSARIES.items():
        expect = expectations(program)
        expects[name] = expect
        jobs[name] = (build(name, program, expect, tmp), expect.pack, expect.seeds)
    for pack, seed in SEED.items():
        scenario = load_scenario(pack)
        assert scenario.task is not None
        jobs[f"{pack}:golden"] = (bundle_program(scenario, tmp / f"{pack}-golden"), pack, (seed,))
        jobs[f"{pack}:starter"] = (scenario.path / scenario.task.starter, pack, (seed,))
    grades: dict[str, Grade] = {}
    limiter = trio.CapacityLimiter(3)

    async def one(name: str, program: Path, pack: str, seeds: tuple[int, ...]) -> None:
        scenario = load_scenario(pack)
        out = tmp / "traces" / name.replace(":", "-")
        out.mkdir(parents=True)
        options = GradeOptions(
            scenario, Program.from_path(program), choose_seeds(scenario, seeds=seeds),
            out_dir=out, executor=pool,
        )  # fmt: skip
        async with limiter:
            grades[name] = await run_grade(options)

    async def all_of_them() -> None:
        async with trio.open_nursery() as nursery:
            for name, (program, pack, seeds) in jobs.items():
                nursery.start_soon(one, name, program, pack, seeds)

    # Three warm workers kept for the whole corpus: every adversary's runs share them with the
    # others', one run after another on the same kept PostgreSQL and nats-server.
    with GradePool(size=3) as pool:
        trio.run(all_of_them)
    markers = [str(p) for p in Path("/tmp").glob(f"{MARKERS}*")]
    return Corpus(grades, expects, leftovers(), markers)


def _why(grade: Grade) -> list[object]:
    return [
        (s.seed, s.outcome, s.verdicts, s.unreadable, s.contained, s.error) for s in grade.seeds
    ]


def _lines(grade: Grade, prefix: str) -> list[str]:
    found = []
    for seed in grade.seeds:
        if seed.trace is None:
            continue
        for e in read_trace(Path(seed.trace)).events:
            value = str(e.get("value", ""))
            if e.get("f") == "log" and value.startswith(prefix):
                found.append(value)
    return found


@pytest.mark.parametrize("name", sorted(ADVERSARIES))
def test_each_adversary_gets_the_reward_its_header_says(corpus: Corpus, name: str) -> None:
    grade, expect = corpus.grades[name], corpus.expects[name]
    assert grade.errors == 0, _why(grade)
    if expect.reward == "below 1":
        assert grade.reward < 1.0, _why(grade)
    else:
        assert grade.reward == pytest.approx(float(expect.reward), abs=1e-6), _why(grade)
    failed = [s for s in grade.seeds if not s.held]
    if expect.unreadable is not None:
        assert failed, _why(grade)
        for seed in failed:
            assert expect.unreadable in (seed.unreadable or ""), _why(grade)
    if expect.fails is not None:
        assert failed, _why(grade)
        for seed in failed:
            assert seed.verdicts.get(expect.fails) is False, _why(grade)
    if expect.probes:
        probes = _lines(grade, "PROBE ")
        assert probes, "the adversary printed no PROBE line"
        allowed = [p for p in probes if not p.split(" ", 3)[2:3] == ["refused"]]
        assert allowed == [], allowed
    if expect.trace_mb is not None:
        for seed in grade.seeds:
            assert seed.trace is not None
            assert Path(seed.trace).stat().st_size <= expect.trace_mb * 1e6, seed.trace
    if expect.absent is not None:
        for seed in grade.seeds:
            assert seed.trace is not None
            forged = [
                e
                for e in read_trace(Path(seed.trace)).events
                if e.get("type") in ("invoke", "ok") and expect.absent in str(e.get("value"))
            ]
            assert forged == [], forged[:3]


@pytest.mark.parametrize("pack", sorted(SEED))
def test_the_honest_golden_gets_1_and_the_starter_0(corpus: Corpus, pack: str) -> None:
    golden, starter = corpus.grades[f"{pack}:golden"], corpus.grades[f"{pack}:starter"]
    assert (golden.reward, golden.errors) == (1.0, 0), _why(golden)
    assert (starter.reward, starter.errors) == (0.0, 0), _why(starter)


def test_nothing_is_left_on_the_host(corpus: Corpus) -> None:
    assert corpus.left == []
    assert corpus.markers == []
