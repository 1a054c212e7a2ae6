"""The pytest plugin (entry point ``pytest11``): the ``env`` / ``chaos_env`` fixtures.

A chaos test reads like the invariant it checks::

    @pytest.mark.chaos(scenario="payments", seed=7)
    def test_no_duplicate_side_effects(env):
        env.inject_fault("redeliver_message", count=3)
        env.run_until_settled(timeout=30)
        assert env.side_effect_count("charge_customer") == 1
        assert env.final_state_is_consistent()

The scenario comes from the ``chaos`` marker, else from the ini option ``chaos_scenario``
(``[tool.pytest.ini_options] chaos_scenario = "payments"``); with neither, the test errors
with one usage line. The harness is imported only when a test asks for the fixture, so
installing chaos-harness costs other test suites nothing. See ``chaos.testing.ChaosEnv`` for
what ``env`` offers. A failing test that used ``env`` reports the run's trace, seed and the
``chaos replay TRACE`` command that reproduces it (a section under the assertion).

Under ``@given`` the fixture is a factory of runs (``env.run(schedule)``, one per example),
so its being function-scoped is what the test wants. For such a test the plugin adjusts its
Hypothesis settings (where Hypothesis's own pytest plugin reads them): the
``function_scoped_fixture`` health check is suppressed, and the explain phase is left out
(it re-runs the failing example some thirty times with line coverage on, minutes of real
runs, to point at lines of the harness). The runs go to the process's ``chaos.floor``,
closed at the end of the session.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from chaos.testing import ChaosEnv


INI_SCENARIO = "chaos_scenario"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        INI_SCENARIO,
        "the scenario (a built-in id or a folder) of `env` when the chaos marker names none",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "chaos(scenario=..., variant='golden', seed=0): the scenario run the `env` fixture "
        f"sets up (scenario defaults to the ini option {INI_SCENARIO})",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    floor = sys.modules.get("chaos.floor")  # started only if a test ran on it
    if floor is not None:
        floor.close_shared_floor()
    pool = sys.modules.get("chaos.grade_pool")  # started only if a test called chaos.grade
    if pool is not None:
        pool.close_shared_pool()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _env_across_examples(item)


def _env_across_examples(item: pytest.Item) -> None:
    """A Hypothesis test taking ``env`` makes a run per example through it: not a fixture
    to reset between examples (no function-scoped-fixture health check), and no explain
    phase (its re-runs are real runs); set in the test's settings, where Hypothesis's
    pytest plugin looks."""
    if not {"env", "chaos_env"} & set(getattr(item, "fixturenames", ())):
        return
    test = getattr(item, "obj", None)
    test = getattr(test, "__func__", test)
    if test is None or "hypothesis" not in sys.modules:
        return
    from hypothesis import HealthCheck, Phase, is_hypothesis_test, settings

    if not is_hypothesis_test(test):
        return
    current = getattr(test, "_hypothesis_internal_use_settings", None) or settings.default
    assert current is not None
    suppressed = {*current.suppress_health_check, HealthCheck.function_scoped_fixture}
    phases = [phase for phase in current.phases if phase is not Phase.explain]
    test._hypothesis_internal_use_settings = settings(
        current, suppress_health_check=suppressed, phases=phases
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """A failing test that used ``env`` reports, beside its assertion, the trace, the seed
    and the exact ``chaos replay`` command that reproduces its run."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    env = getattr(item, "funcargs", {}).get("chaos_env")
    text = env.reproduction() if env is not None else None
    if not text:
        return
    addsection = getattr(report.longrepr, "addsection", None)
    if addsection is not None:
        addsection("chaos: reproduce this run", text)
    else:
        report.sections.append(("chaos: reproduce this run", text))


@pytest.fixture
def chaos_env(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosEnv:
    """A scenario run to set up with faults, run and assert on (see the module doc)."""
    from chaos.scenario import Scenario, load_scenario
    from chaos.testing import ChaosEnv
    from ground.errors import ConfigError

    marker = request.node.get_closest_marker("chaos")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    scenario = options.pop("scenario", None) or request.config.getini(INI_SCENARIO)
    if not scenario:
        pytest.fail(
            f"chaos: no scenario for {request.node.nodeid}: mark the test "
            f"@pytest.mark.chaos(scenario=...) or set the ini option {INI_SCENARIO}",
            pytrace=False,
        )
    loaded = scenario if isinstance(scenario, Scenario) else load_scenario(str(scenario))
    unknown = set(options) - {"variant", "seed"}
    if unknown:
        raise ConfigError(f"chaos marker: unknown option(s) {', '.join(sorted(unknown))}")
    return ChaosEnv(loaded, out_dir=tmp_path, **options)


@pytest.fixture
def env(chaos_env: ChaosEnv) -> ChaosEnv:
    """``chaos_env`` under the short name the docs use."""
    return chaos_env
