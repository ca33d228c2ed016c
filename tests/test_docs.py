"""The docs site builds strictly, and its generated reference page matches the registries."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(
    0, str(ROOT / "tools")
)  # the generator is a script of the repository, not the package

from docgen import render  # noqa: E402


def test_the_docs_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "index.html").exists()


def test_the_reference_page_is_what_its_command_prints():
    """``python tools/docgen.py`` in a fresh process (the package's own registries only)."""
    result = subprocess.run(
        [sys.executable, "tools/docgen.py"], cwd=ROOT, capture_output=True, text=True,
        check=True, timeout=300,
    )  # fmt: skip
    assert (ROOT / "docs" / "reference.md").read_text() == result.stdout, (
        "docs/reference.md is stale: python tools/docgen.py > docs/reference.md"
    )


def test_the_reference_page_lists_whatever_is_registered():
    """The test session's plugin (tests/lab_extras.py) shows up in every table it adds to."""
    page = render(ROOT / "conf" / "base")
    for name in ("extra_method", "extra_last_step", "extra_head", "invert", "extra_convnet_1",
                 "extra_bars"):  # fmt: skip
        assert f"| `{name}` |" in page
