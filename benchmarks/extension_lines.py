"""Lines a method takes as a plugin: the five one-file methods of docs/extending.md against the
same methods written as plugins on the API before them (kept as text under
``benchmarks/results/extension_lines/before/``, with the YAML blocks they needed).

    .venv/bin/python benchmarks/extension_lines.py

Lines of code are non-blank lines that are not comments (docstrings count); a YAML block's lines
are its mode's block and its entry in the ``plugins`` list.
"""

from __future__ import annotations

import re
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
BEFORE = PROJECT / "benchmarks" / "results" / "extension_lines" / "before"
PAGE = PROJECT / "docs" / "extending.md"
METHODS = {  # the page's file → (the plugin written before, the mode its YAML block configured)
    "sam": ("sam_ft", "sam"),
    "ema": ("ema_ft", "ema"),
    "bitfit": ("bitfit", "bitfit"),
    "replay": ("replay_ft", "replay"),
    "fishr": ("fishr_ft", "fishr"),
}


def code_lines(text: str) -> int:
    """Non-blank lines that are not comments."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def block_lines(yaml_text: str, mode: str) -> int:
    """The lines of mode ``mode``'s block (its key and everything indented below it), plus its
    line in the plugins list."""
    lines = yaml_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line == f"  {mode}:")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")),
               len(lines))  # fmt: skip
    return end - start + 1


def page_files() -> dict[str, str]:
    """The ``# file:`` blocks of docs/extending.md, by path."""
    return dict(re.findall(r"```\w+\n# file: (\S+)\n(.*?)```", PAGE.read_text(), re.S))


def rows() -> list[tuple[str, int, int, int]]:
    """(method, lines before, lines now, YAML lines before) for each method; YAML now is 0."""
    files, yaml_text = page_files(), (BEFORE / "parameters_plugins.yml.txt").read_text()
    return [
        (name, code_lines((BEFORE / f"{before}.py.txt").read_text()),
         code_lines(files[f"one_file/{name}.py"]), block_lines(yaml_text, mode))
        for name, (before, mode) in METHODS.items()
    ]  # fmt: skip


def main() -> None:
    print("| method | lines of code before → now | YAML lines before → now |")
    print("|---|---|---|")
    for name, before, now, yaml_before in rows():
        print(f"| {name} | {before} → {now} | {yaml_before} → 0 |")


if __name__ == "__main__":
    main()
