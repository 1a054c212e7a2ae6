"""The task's libraries copied once per process, on a read-only tmpfs (``chaos.sandbox._layer``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.sandbox import _python
from chaos.sandbox._layer import close_layers, library_site

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
LIBRARIES = ("psycopg[binary]",)


def test_one_read_only_copy_per_process_removed_when_closed() -> None:
    try:
        site = library_site(LIBRARIES)
        assert library_site(LIBRARIES) == site  # made once
        copied = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
        assert {str(r) for _, r in _python.library_files(LIBRARIES)} == copied
        with pytest.raises(OSError, match="Read-only file system"):
            (site / "psycopg" / "planted.py").write_text("")
        mount = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                 if f" {site} " in line]  # fmt: skip
        assert len(mount) == 1
        assert mount[0].split()[3] == "/"  # a tmpfs of its own: no host folder as its root
        assert " ro," in mount[0]
    finally:
        close_layers()
    assert not site.exists()
    assert f" {site} " not in Path("/proc/self/mountinfo").read_text()
