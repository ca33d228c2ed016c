"""docs/extending.md runs as written: its plugin package, outside seq2final, in a real `kedro run`."""

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from seq2final.core import plugins
from seq2final.core.errors import Seq2FinalError
from seq2final.core.plugins import ENTRY_POINT_GROUP, load_plugins

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
TEXT = PAGE.read_text()
FILES = dict(re.findall(r"```\w+\n# file: (\S+)\n(.*?)```", TEXT, re.S))
(RUN,) = re.findall(r"```bash\n# run\n(.*?)\n```", TEXT, re.S)


def test_the_page_holds_a_plugin_package_its_configuration_and_the_command():
    modules = {Path(name).stem for name in FILES if name.startswith("my_lab/")}
    assert modules == {"__init__", "methods", "shifts", "architectures", "sources"}
    assert "conf/local/parameters_my_lab.yml" in FILES
    assert RUN.startswith("kedro run --params ")


def test_the_plugin_uses_public_names_only():
    """Every seq2final name the page's plugin imports comes from a public package's ``__all__``."""
    imports = [
        (package, name.strip())
        for name_, text in FILES.items()
        if name_.endswith(".py")
        for package, names in re.findall(r"^from (seq2final\S*) import (.*)$", text, re.M)
        for name in names.split(",")
    ]
    assert imports
    for package, name in imports:
        assert package.count(".") == 1, f"{package} is not a public package"
        assert name in importlib.import_module(package).__all__, (package, name)


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory, copy_project_to) -> Path:
    """The page's package in a folder of its own, the page's config in a copy of the project, and
    the page's command run there (budget smoke, tracking off) in a fresh process."""
    outside = tmp_path_factory.mktemp("outside")
    project = copy_project_to(tmp_path_factory.mktemp("project"))
    for name, text in FILES.items():
        target = (project if name.startswith("conf/") else outside) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    command = shlex.split(RUN)
    command[0] = str(Path(sys.executable).with_name("kedro"))
    command[-1] += ",budget:smoke,mlflow.enabled:false"
    env = {**os.environ, "PYTHONPATH": str(outside), "KEDRO_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return project


def test_the_page_command_trains_the_new_method_on_everything_new(plugin_run):
    (record_path,) = (plugin_run / "data/07_model_output/results").glob("*.json")
    record = json.loads(record_path.read_text())
    assert (record["method"], record["historical"], record["final"]) == (
        "lp",
        "erm",
        "linear_probe",
    )
    assert record["dataset"] == "stripes" and record["arch"] == "wide_convnet_2"
    # the stem's 7×7 conv, two 3×3 conv blocks and the head: the paper's counting convention
    assert record["parameters"] == 3 * 64 * 49 + 64 * 128 * 9 + 128 * 256 * 9 + 256 * 10 + 10
    assert [f["stage"] for f in record["fits"]] == ["head"]
    assert record["test_size"] == 100 and (record["test_accuracy"] * 100) == pytest.approx(
        round(record["test_accuracy"] * 100)
    )  # counted on the 100 test images
    (manifest,) = (plugin_run / "data/03_primary/sequences").glob("*/manifest.json")
    steps = json.loads(manifest.read_text())["steps"]
    assert [s["state"]["darkness"] for s in steps] == [0, 1, 1, 2]
    assert [sum(s["sizes"].values()) for s in steps] == [200, 120, 200, 220]


def test_an_installed_plugin_is_loaded_through_its_entry_point(tmp_path, monkeypatch):
    (tmp_path / "lab_entry.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [EntryPoint("lab", "lab_entry", ENTRY_POINT_GROUP)]
    monkeypatch.setattr(
        plugins, "entry_points", lambda group: found if group == ENTRY_POINT_GROUP else []
    )
    assert load_plugins() == ["lab_entry"]
    assert sys.modules["lab_entry"].LOADED


def test_a_plugin_that_does_not_import_is_one_line_naming_it():
    with pytest.raises(Seq2FinalError, match="cannot import 'no_such_lab.methods'") as error:
        load_plugins(["no_such_lab.methods"])
    assert "\n" not in str(error.value)
