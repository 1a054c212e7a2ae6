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
"""

from __future__ import annotations

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
    from chaos.errors import ConfigError
    from chaos.scenario import Scenario, load_scenario
    from chaos.testing import ChaosEnv

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
