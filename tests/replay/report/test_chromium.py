"""The report in a real browser: headless Chromium renders it, shows the verdict and the fault
bars, runs nothing from the trace, and takes a legible screenshot."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chaos import cli
from tests.replay.report.samples import ev, write_payments

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]
EVIL = (
    "<script>document.body.setAttribute('data-pwned','script')</script>"
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if CHROMIUM is None:
        reason = "the chromium binary is not installed (Debian: apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: .ci/run installs it, so CI must not skip this test")
        pytest.skip(reason)
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class Dom(HTMLParser):
    """Start tags (name, attributes) and text of a serialised DOM."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture
def report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """`chaos report` on a violating original and a replay whose order ids are hostile HTML."""
    original = write_payments(tmp_path / "payments-seed7.trace")
    evil = [
        ev(2.6, "consumer", "invoke", "charge", EVIL),
        ev(2.7, "consumer", "ok", "charge", EVIL),
    ]
    replay = write_payments(tmp_path / "payments-seed7.replay-1.trace", violated=False, extra=evil)
    out = tmp_path / "report.html"
    cli.main(["report", str(original), str(replay), "-o", str(out)])
    assert capsys.readouterr().out == f"{out}\n"
    return out


def test_chromium_renders_verdict_and_fault_bars(report: Path, tmp_path: Path) -> None:
    done = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Dom()
    dom.feed(done.stdout)
    text = " ".join(dom.text)
    names = [name for name, _ in dom.tags]
    css = [attrs.get("class") or "" for _, attrs in dom.tags]
    body = next(attrs for name, attrs in dom.tags if name == "body")
    assert "data-pwned" not in body  # nothing from the trace ran
    assert "script" not in names
    assert "img" not in names
    assert EVIL in text  # the hostile order id is shown as text
    assert names.count("svg") == 2  # one timeline per trace
    assert css.count("fault k-redeliver") == 2
    assert css.count("fault k-partition") == 2
    assert "redeliver f0 +1.000s → +3.000s" in text
    assert "verdict violated" in css
    assert "exactly_once" in text
    assert "VIOLATED" in text
    assert "o-005" in [t.strip() for t in text.split()]
    assert "original: payments-seed7.trace" in text
    assert "replay 1: payments-seed7.replay-1.trace" in text


def test_chromium_screenshot(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    done = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2200", report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2200)
    assert len(data) > 50_000  # a blank or unstyled page compresses to far less
