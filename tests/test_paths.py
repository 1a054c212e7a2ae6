"""What a command reads and writes: a regular file or a new path, never a device, a FIFO, a
socket or a folder where a file goes; refused (exit 2, one line) before anything runs, and
nothing at the path is touched. The checks themselves (ground._paths), then every command."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ground._paths import (
    check_in_file,
    check_in_path,
    check_out_dir,
    check_out_file,
    check_private,
    open_regular,
    replace_file,
)
from ground.errors import ConfigError
from replay.trace import read_trace
from tests.replay.report.samples import write_payments

ROOT = os.geteuid() == 0


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A FIFO, a listening unix socket, a folder, a regular file and (as root) a clone of
    /dev/full (a character device node 1:7), each in ``tmp_path``."""
    found = {"folder": tmp_path / "folder", "file": tmp_path / "file.txt"}
    found["folder"].mkdir()
    found["file"].write_text("keep me\n")
    found["fifo"] = tmp_path / "fifo"
    os.mkfifo(found["fifo"])
    found["socket"] = tmp_path / "sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(found["socket"]))
    if ROOT:
        found["device"] = tmp_path / "full"
        os.mknod(found["device"], stat.S_IFCHR | 0o666, os.makedev(1, 7))
    try:
        yield found
    finally:
        listener.close()


def _fingerprint(path: Path) -> tuple[int, int, int, bytes | None]:
    """What a path is (type and mode, device number, size) and its bytes if a regular file."""
    st = path.lstat()
    data = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
    return st.st_mode, st.st_rdev, st.st_size, data


# -- the checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "words"),
    [("fifo", "a FIFO"), ("socket", "a socket"), ("folder", "a folder"),
     ("device", "a character device")],
)  # fmt: skip
def test_an_output_that_is_not_a_regular_file_is_refused(
    specials: dict[str, Path], kind: str, words: str
) -> None:
    if kind not in specials:
        pytest.skip("a device node needs root to create")
    path = specials[kind]
    before = _fingerprint(path)
    with pytest.raises(ConfigError, match=words):
        check_out_file(path, "-o", "report")
    with pytest.raises(ConfigError, match=words):
        replace_file(path, "<html>", "-o")
    assert _fingerprint(path) == before


def test_a_symlink_to_a_device_is_a_device(specials: dict[str, Path], tmp_path: Path) -> None:
    if "device" not in specials:
        pytest.skip("a device node needs root to create")
    link = tmp_path / "link.html"
    link.symlink_to(specials["device"])
    with pytest.raises(ConfigError, match="a character device"):
        replace_file(link, "<html>", "-o")
    assert link.is_symlink()
    assert stat.S_ISCHR(specials["device"].stat().st_mode)


def test_a_regular_file_is_replaced_whole_and_a_new_path_created(tmp_path: Path) -> None:
    old = tmp_path / "old.html"
    old.write_text("old")
    replace_file(old, "new", "-o")
    replace_file(tmp_path / "fresh.html", b"bytes", "-o")
    assert old.read_text() == "new"
    assert (tmp_path / "fresh.html").read_bytes() == b"bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.html", "old.html"]  # no temp
    with pytest.raises(ConfigError, match="no folder"):  # a report's folder must exist
        replace_file(tmp_path / "no" / "such" / "r.html", "x", "-o")
    new = tmp_path / "a" / "b.trace"  # a trace's folders are made when it is written
    assert check_out_file(new, "--out", "trace") == new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.html", "old.html"]


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "file"])
def test_an_output_folder_that_is_not_a_folder_is_refused(
    specials: dict[str, Path], kind: str
) -> None:
    if kind not in specials:
        pytest.skip("a device node needs root to create")
    with pytest.raises(ConfigError, match="not a folder"):
        check_out_dir(specials[kind], "--out-dir")


@pytest.mark.parametrize(
    ("kind", "words"),
    [("fifo", "a FIFO"), ("socket", "a socket"), ("folder", "a folder"),
     ("device", "a character device")],
)  # fmt: skip
def test_an_input_that_is_not_a_regular_file_is_refused_without_reading_it(
    specials: dict[str, Path], kind: str, words: str
) -> None:
    if kind not in specials:
        pytest.skip("a device node needs root to create")
    with pytest.raises(ConfigError, match=f"{words}, not a schedule file"):
        check_in_file(specials[kind], "--schedule", "schedule")
    with pytest.raises(ConfigError, match=words):
        open_regular(specials[kind], "trace", "trace")  # a FIFO: no wait for a writer
    if kind != "folder":
        with pytest.raises(ConfigError, match=words):
            check_in_path(specials[kind], "--impl")
    assert check_in_path(specials["folder"], "--impl") == specials["folder"]


def test_a_key_others_can_read_is_no_key(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text("0123456789abcdef0123\n")
    for mode in (0o644, 0o640, 0o604, 0o660):
        key.chmod(mode)
        with pytest.raises(
            ConfigError, match=f"mode {mode:04o}: a key others can read is no key \\(chmod 600"
        ):
            check_private(key, "--heldout-key")
    key.chmod(0o600)
    assert check_private(key, "--heldout-key") == key


# -- every command ---------------------------------------------------------------------------


def _chaos(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHAOS_REGISTRY_DIR": str(tmp_path / "registry")}
    return subprocess.run(
        [sys.executable, "-m", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=60,  # a FIFO read would hang: the timeout fails the test
        cwd=tmp_path,
        env=env,
        check=False,
    )


def _refused(tmp_path: Path, args: list[str], needle: str) -> None:
    done = _chaos(tmp_path, *args)
    assert done.returncode == 2, (args, done.stderr)
    assert done.stderr.count("\n") == 1, (args, done.stderr)
    assert done.stderr.startswith("chaos: error: "), (args, done.stderr)
    assert needle in done.stderr, (args, done.stderr)


def test_show_and_replay_refuse_what_is_not_a_trace_file(
    tmp_path: Path, specials: dict[str, Path]
) -> None:
    """`chaos show /dev/zero` said "trace is empty" and `chaos show FIFO` hung."""
    for command in (["show"], ["replay"], ["report"]):
        zero = "/dev/zero is a character device, not a trace file"
        _refused(tmp_path, [*command, "/dev/zero"], zero)
        _refused(tmp_path, [*command, str(specials["fifo"])], "is a FIFO, not a trace file")
        _refused(tmp_path, [*command, str(specials["folder"])], "is a folder, not a trace file")
    _refused(tmp_path, ["search", "payments", "--resume", str(specials["fifo"])], "a FIFO")
    with pytest.raises(Exception, match="not a trace file"):
        read_trace(specials["socket"])


def test_report_refuses_a_device_fifo_or_socket_and_never_replaces_it(
    tmp_path: Path, specials: dict[str, Path]
) -> None:
    """`chaos report T -o /dev/full` as root replaced the device with an HTML file."""
    trace = write_payments(tmp_path / "run.trace")
    for kind in ("device", "fifo", "socket", "folder"):
        if kind not in specials:
            continue  # (not root: no device node to try)
        before = _fingerprint(specials[kind])
        _refused(tmp_path, ["report", str(trace), "-o", str(specials[kind])], str(specials[kind]))
        assert _fingerprint(specials[kind]) == before
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "payments", "--schedule", "{fifo}"], "--schedule {fifo} is a FIFO"),
        (["run", "payments", "--schedule", "/dev/zero"], "a character device"),
        (["run", "payments", "--impl", "{fifo}"], "--impl {fifo} is a FIFO"),
        (["run", "payments", "--out", "{fifo}"], "--out {fifo} is a FIFO"),
        (["run", "payments", "--out", "{socket}"], "is a socket"),
        (["search", "payments", "--out", "{fifo}"], "is a FIFO"),
        (["grade", "payments", "--impl", "{fifo}"], "--impl {fifo} is a FIFO"),
        (["grade", "payments", "--impl", "{starter}", "--public", "--junit", "{fifo}"], "a FIFO"),
        (["grade", "payments", "--impl", "{starter}", "--heldout-key", "{fifo}"], "a FIFO"),
        (["grade", "payments", "--impl", "{starter}", "--out-dir", "{fifo}"], "not a folder"),
        (["task", "payments", "-o", "{fifo}"], "not a folder"),
        (["task", "payments", "--format", "harbor", "--heldout-key", "{fifo}"], "a FIFO"),
        (["sweep", "payments", "--seeds", "1", "--out-dir", "{socket}"], "not a folder"),
        (["validate", "payments", "--out-dir", "{fifo}"], "not a folder"),
    ],
)
def test_every_command_refuses_special_files_before_anything_runs(
    tmp_path: Path, specials: dict[str, Path], args: list[str], needle: str
) -> None:
    names = {k: str(v) for k, v in specials.items()}
    names["starter"] = str(Path(__file__).parent.parent / "scenarios/payments/starter.py")
    before = {k: _fingerprint(v) for k, v in specials.items()}
    _refused(tmp_path, [a.format(**names) for a in args], needle.format(**names))
    assert {k: _fingerprint(v) for k, v in specials.items()} == before
    assert not (tmp_path / "traces").exists()


def test_a_heldout_key_others_can_read_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "heldout.key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    key.chmod(0o644)
    starter = str(Path(__file__).parent.parent / "scenarios/payments/starter.py")
    for args in (
        ["grade", "payments", "--impl", starter, "--heldout-key", str(key)],
        ["task", "payments", "--format", "harbor", "--heldout-key", str(key)],
    ):
        _refused(tmp_path, args, f"mode 0644: a key others can read is no key (chmod 600 {key}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heldout.key"]
