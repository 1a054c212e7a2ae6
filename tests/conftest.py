"""Fixtures of every test: a grade's kept warm workers do not outlive the test that
started them (``chaos.grade`` keeps them for the process's next grade; a later test that
counts what is left behind would count them)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_kept_grade_workers() -> Iterator[None]:
    yield
    pool = sys.modules.get("chaos.grade_pool")  # started only if a test graded through it
    if pool is not None:
        pool.close_shared_pool()
