"""Every worked example of docs/extending.md runs as written, in scratch copies of the registries."""

import re
from pathlib import Path

import pytest

from seq2final.data import SOURCES
from seq2final.methods import METHODS
from seq2final.models import ARCHITECTURES
from seq2final.shifts import SHIFTS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
EXAMPLES = dict(re.findall(r"```python\n# example: (\w+)\n(.*?)```", PAGE.read_text(), re.S))


def test_the_page_has_one_example_per_building_block():
    assert set(EXAMPLES) == {"method", "shift", "architecture", "dataset"}


@pytest.mark.parametrize("name", ["method", "shift", "architecture", "dataset"])
def test_the_example_runs_and_its_claims_hold(name, source, tmp_path, monkeypatch):
    for registry in (METHODS, SHIFTS, ARCHITECTURES, SOURCES):  # leave the real ones untouched
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    exec(compile(EXAMPLES[name], f"docs/extending.md ({name})", "exec"),
         {"source": source, "tmp": str(tmp_path)})  # fmt: skip
