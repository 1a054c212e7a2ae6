"""The example pack of docs/scenarios.md, copied out of the page (so the page cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "scenarios.md"
FILE = re.compile(r"<!-- pack-file: (\S+) -->\n```[a-z]*\n(.*?)\n```\n", re.S)


def write_doc_pack(folder: Path) -> Path:
    """Write every ``<!-- pack-file: NAME -->`` block of docs/scenarios.md into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in FILE.findall(DOC.read_text(encoding="utf-8")):
        (folder / name).write_text(body + "\n", encoding="utf-8")
    return folder
