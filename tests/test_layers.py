"""The package's layers hold: import-linter's contract, no exceptions, no imports hidden in functions."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
SOURCE = PROJECT / "src" / "seq2final"


def test_the_layers_contract_holds_with_no_exceptions():
    config = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = config["contracts"]
    assert contract["type"] == "layers" and "ignore_imports" not in contract
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(linter), "--no-cache"], cwd=PROJECT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 kept, 0 broken" in result.stdout


def test_every_import_inside_a_function_is_a_commented_lazy_import():
    """Imports belong at the top of a module; the few deliberate lazy imports of heavy libraries
    say so (``# lazy: <reason>``) on their line or the line above."""
    offenders = []
    for path in sorted(SOURCE.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    here = lines[inner.lineno - 1] + lines[inner.lineno - 2]
                    if "# lazy: " not in here:
                        offenders.append(f"{path.relative_to(PROJECT)}:{inner.lineno}")
    assert offenders == []
