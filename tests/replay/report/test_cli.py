"""`chaos report`: writes the page, prints its path; bad traces and bad -o exit 2 in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from chaos import cli
from tests.replay.report.samples import write_payments


def chaos(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        cli.main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_writes_the_page_and_prints_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = write_payments(tmp_path / "payments-golden-seed7.trace")
    replay = write_payments(tmp_path / "payments-golden-seed7.replay-3.trace", violated=False)
    out = tmp_path / "report.html"
    code, stdout, err = chaos(capsys, "report", str(original), str(replay), "-o", str(out))
    assert (code, stdout, err) == (0, f"{out}\n", "")
    page = out.read_text(encoding="utf-8")
    assert "original: payments-golden-seed7.trace" in page
    assert "replay 3: payments-golden-seed7.replay-3.trace" in page
    assert "VIOLATED" in page
    assert not list(tmp_path.glob(".report.html.*"))  # no temp file left behind


def test_default_output_is_beside_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = write_payments(tmp_path / "run.trace")
    code, stdout, _ = chaos(capsys, "report", str(original))
    assert code == 0
    assert stdout == f"{tmp_path / 'run.report.html'}\n"
    assert (tmp_path / "run.report.html").stat().st_size > 1000


def test_partial_trace_is_reported_as_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_payments(tmp_path / "full.trace").read_bytes()
    (tmp_path / "cut.trace").write_bytes(data[: len(data) // 2])
    code, _, err = chaos(
        capsys, "report", str(tmp_path / "cut.trace"), "-o", str(tmp_path / "r.html")
    )
    assert (code, err) == (0, "")
    assert "PARTIAL: cut off mid-frame" in (tmp_path / "r.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: b"", "trace is empty"),
        (lambda data: b"NOTATRACE" + data[9:], "magic"),
        (lambda data: data[:200] + bytes([data[200] ^ 0xFF]) + data[201:], "checksum"),
        (lambda data: data[:8] + b"\x00\x63" + data[10:], "version"),
    ],
    ids=["empty", "magic", "checksum", "version"],
)
def test_bad_traces_exit_2_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[bytes], bytes],
    message: str,
) -> None:
    data = write_payments(tmp_path / "good.trace").read_bytes()
    bad = tmp_path / "bad.trace"
    bad.write_bytes(damage(data))
    out = tmp_path / "r.html"
    # a bad replay trace fails the whole report, like a bad original
    code, stdout, err = chaos(
        capsys, "report", str(tmp_path / "good.trace"), str(bad), "-o", str(out)
    )
    assert (code, stdout) == (2, "")
    assert err.startswith("chaos: error: ")
    assert message in err.lower()
    assert err.count("\n") == 1
    assert not out.exists()


def test_missing_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = chaos(capsys, "report", str(tmp_path / "nope.trace"))
    assert code == 2
    assert (
        err
        == f"chaos: error: cannot read trace {tmp_path / 'nope.trace'}: No such file or directory\n"
    )


@pytest.mark.parametrize("where", ["dir", "under-a-file", "missing-dir"])
def test_unwritable_output_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    original = write_payments(tmp_path / "run.trace")
    (tmp_path / "afile").write_text("x")
    out = {
        "dir": tmp_path,
        "under-a-file": tmp_path / "afile" / "r.html",
        "missing-dir": tmp_path / "no" / "such" / "r.html",
    }[where]
    code, stdout, err = chaos(capsys, "report", str(original), "-o", str(out))
    assert (code, stdout) == (2, "")
    assert err.startswith("chaos: error: ")
    assert str(out) in err
    assert err.count("\n") == 1


def test_a_trace_is_never_overwritten_by_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = write_payments(tmp_path / "run.trace")
    other = write_payments(tmp_path / "other.trace", violated=False)
    before = {p: p.read_bytes() for p in (original, other)}
    for out in (original, other):
        code, stdout, err = chaos(capsys, "report", str(original), "-o", str(out))
        assert (code, stdout) == (2, "")
        assert err == (
            f"chaos: error: -o {out} is a chaos trace; refusing to overwrite it with a report\n"
        )
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.trace", "run.trace"]
