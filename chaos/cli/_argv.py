"""The command line before typer reads it: options whose value may be left out."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def _looks_like_address(word: str) -> bool:
    return ":" in word or word in ("auto", "local")


#: Options whose value may be left out: option -> (the value it then means, what a following
#: word must look like to be its value). typer does not hand click an optional value, so
#: ``main`` fills it in: a bare ``--ray`` is ``--ray=local``, a bare ``--stress`` ``--stress
#: auto``. ``--ray=ADDRESS`` / ``--stress=N`` are always read as given.
OPTIONAL_VALUES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "--ray": ("local", _looks_like_address),
    "--stress": ("auto", str.isdigit),
}


def _optional_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with the default value filled in after an optional-value option given alone
    (last, before another option, or before a word that cannot be its value)."""
    out: list[str] = []
    args = list(argv)
    for index, arg in enumerate(args):
        if arg == "--":
            return out + args[index:]
        if arg in OPTIONAL_VALUES:
            default, is_value = OPTIONAL_VALUES[arg]
            following = args[index + 1] if index + 1 < len(args) else None
            if following is None or following.startswith("-") or not is_value(following):
                out.append(f"{arg}={default}")
                continue
        out.append(arg)
    return out
