"""docs/extending.md runs as written: its plugin package, outside seq2final, in a real `kedro run`."""

import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

from seq2final.core import plugins
from seq2final.core.errors import Seq2FinalError
from seq2final.core.plugins import ENTRY_POINT_GROUP, load_plugins
from seq2final.models import TransformedModel
from seq2final.runs.result_store import ResultStore
from seq2final.runs.sequence_store import SequenceStore
from seq2final.training.engine import Engine, predict_logits
from seq2final.training.tensors import TensorSplit

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
BENCHMARK = PAGE.parents[1] / "benchmarks" / "extension_lines.py"
TEXT = PAGE.read_text()
FILES = dict(re.findall(r"```\w+\n# file: (\S+)\n(.*?)```", TEXT, re.S))
(RUN,) = re.findall(r"```bash\n# run\n(.*?)\n```", TEXT, re.S)
(RUN_METHODS,) = re.findall(r"```bash\n# run methods\n(.*?)\n```", TEXT, re.S)
(RUN_ONE_FILE,) = re.findall(r"```bash\n# run one file\n(.*?)\n```", TEXT, re.S)


def test_the_page_holds_a_plugin_package_its_configuration_and_the_command():
    modules = {Path(name).stem for name in FILES if name.startswith("my_lab/")}
    assert modules == {"__init__", "methods", "shifts", "architectures", "sources"}
    assert "conf/local/parameters_my_lab.yml" in FILES
    assert RUN.startswith("kedro run --params ")
    methods = {Path(name).stem for name in FILES if name.startswith("my_methods/")}
    assert methods == {"__init__", "vrex", "lwf", "phased"}
    one_file = {Path(name).stem for name in FILES if name.startswith("one_file/")}
    assert one_file == {"__init__", "sam", "ema", "bitfit", "replay", "fishr", "temperature"}
    assert not [name for name in FILES if name.startswith("conf/one_file")]  # no YAML
    assert RUN_ONE_FILE.startswith("kedro run --params plugins:one_file,")
    assert "conf/my_methods/parameters_my_methods.yml" in FILES
    assert RUN_METHODS.startswith("kedro run --env my_methods --params ")
    lines = len(FILES["my_methods/vrex.py"].splitlines())
    assert f"Adding V-REx took one file of {lines} lines" in TEXT  # the page's count is its own


def test_the_plugin_uses_public_names_only():
    """Every seq2final name the page's plugin imports comes from a public package's ``__all__``."""
    imports = [
        (package, name.strip())
        for name_, text in FILES.items()
        if name_.endswith(".py")
        for package, names in re.findall(r"^from (seq2final\S*) import (\([^)]*\)|.*)$", text, re.M)
        for name in names.strip("()").split(",")
        if name.strip()
    ]
    assert imports
    for package, name in imports:
        assert package.count(".") == 1, f"{package} is not a public package"
        assert name in importlib.import_module(package).__all__, (package, name)


def _run_page(
    run: str, tmp_path_factory, copy_project_to, extra: str = "", files: dict | None = None
) -> Path:
    """The page's packages in a folder of their own, the page's config in a copy of the project
    (``files``: those only), and the page's command ``run`` there (budget smoke, tracking off,
    then ``extra`` parameters) in a fresh process."""
    outside = tmp_path_factory.mktemp("outside")
    project = copy_project_to(tmp_path_factory.mktemp("project"))
    for name, text in (FILES if files is None else files).items():
        target = (project if name.startswith("conf/") else outside) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    command = shlex.split(run)
    command[0] = str(Path(sys.executable).with_name("kedro"))
    command[-1] += ",budget:smoke,mlflow.enabled:false" + extra
    path = os.pathsep.join(filter(None, [str(outside), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "KEDRO_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return project


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory, copy_project_to) -> Path:
    return _run_page(RUN, tmp_path_factory, copy_project_to)


@pytest.fixture(scope="module")
def methods_run(tmp_path_factory, copy_project_to) -> Path:
    return _run_page(RUN_METHODS, tmp_path_factory, copy_project_to, TINY)


@pytest.fixture(scope="module")
def one_file_run(tmp_path_factory, copy_project_to) -> Path:
    one_file = {name: text for name, text in FILES.items() if name.startswith("one_file/")}
    return _run_page(RUN_ONE_FILE, tmp_path_factory, copy_project_to, TINY, one_file)


TINY = (  # a tiny four-step sequence and the smallest ConvNet: the methods' kinds are the point
    ",sequence:source100:rotation60:corruption100:label_flip60,arch:convnet_1,"
    "build_sequences.test_size:50,build_sequences.oracle_size:120"
)


def test_the_three_methods_of_three_kinds_train_end_to_end(methods_run):
    records = {}
    for path in (methods_run / "data/07_model_output/results").glob("*.json"):
        record = json.loads(path.read_text())
        records[record["method"]] = record
    assert {name: (r["historical"], r["final"]) for name, r in records.items()} == {
        "vrex_ft": ("vrex", "ft"),
        "lwf": ("sequential_lwf", "lwf"),
        "fresh_head": ("erm", "fresh_head_ft"),
    }
    params = records["lwf"]["fits"][0]["params"]  # the final fit: lr drawn, the rest fixed
    assert 1e-5 <= params.pop("lr") <= 1e-3
    assert params == {"lwf_lambda": 1.0, "lwf_temperature": 2.0}
    log = (methods_run / "logs/info.log").read_text()
    drawn = re.findall(r" vrex: valid [\d.]+ \(.*\) with lr=\S+, vrex_lambda=([\d.e+-]+)", log)
    assert drawn and 0.1 <= float(drawn[0]) <= 100.0  # the term's own value, from its space
    steps = re.findall(r"sequential_lwf · (step\d): valid .* lwf_lambda=1, lwf_temperature=2", log)
    assert steps == ["step1", "step2"]  # every step of the chain distils its predecessor


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
    assert [s["state"]["darkness"] for s in steps] == [0, 0.5, 0.5, 2.5]  # darken@0.5, darken@2
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


def test_a_plugin_that_takes_a_built_in_name_is_one_line_naming_the_registry_and_name(
    tmp_path, monkeypatch
):
    """A plugin registering ``ft`` again is refused as a clash, not as an import path to fix."""
    (tmp_path / "lab_clash.py").write_text(
        "from seq2final.methods import final_mode\n\n\n"
        "@final_mode('ft', 'my fine-tuning', continues_from=('model',), config_keys=())\n"
        "def ft(ctx, config, state):\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(Seq2FinalError) as error:
        load_plugins(["lab_clash"])
    assert str(error.value) == (
        "parameter 'plugins': 'lab_clash' registers final mode 'ft', which is already registered "
        "(built in or by a plugin loaded before it); valid: a final mode name not registered yet"
    )
    sys.modules.pop("lab_clash", None)


def _records(project: Path) -> dict[str, dict]:
    paths = (project / "data/07_model_output/results").glob("*.json")
    return {record["method"]: record for record in map(json.loads, map(Path.read_text, paths))}


def test_six_methods_of_one_file_each_train_with_no_yaml_in_their_defaults(one_file_run):
    records = _records(one_file_run)
    assert {name: (r["historical"], r["final"]) for name, r in records.items()} == {
        "sam_irm_ft": ("sam_irm", "ft"), "ema_ft": ("erm", "ema"), "bitfit": ("erm", "bitfit"),
        "replay_ft": ("erm", "replay"), "fishr_ft": ("fishr", "ft"),
        "ts_ft": ("erm", "temperature_ft"),
    }  # fmt: skip
    log = (one_file_run / "logs/info.log").read_text()
    # SAM-IRM searched its declared defaults: the fit's, L2's, IRM's and the recipe's
    drawn = re.search(r" sam_irm: valid [\d.]+ \(.*\) with (.*)", log)
    assert drawn, log[-3000:]
    names = [part.split("=")[0] for part in drawn.group(1).split(", ")]
    assert sorted(names) == ["dropout", "irm_penalty", "lr", "sam_rho", "weight_decay"]
    assert re.search(r" fishr: valid [\d.]+ \(.*\) with .*fishr_lambda=", log)

    # BitFit's epochs cost what training its chosen parameters costs: less than EMA's full
    # fine-tuning of the same images, and more than a forward pass alone (the FLOPs counted on
    # the parameters that train, not on the whole network)
    def per_epoch(record):
        (fit,) = record["fits"]
        return fit["train_flops"] / sum(len(t["valid_curve"]) - 1 for t in fit["trial_summaries"])

    bitfit, full = per_epoch(records["bitfit"]), per_epoch(records["ema_ft"])
    assert full / 3 < bitfit < full * 0.9


def test_a_mode_returns_a_model_with_an_output_transform_scored_and_stored_so(one_file_run):
    """Temperature scaling's job is stored as the pair and scored on its transformed logits:
    loaded back, the model is the fine-tuned network with the temperature that minimises the
    validation NLL, and the record's test NLL is the transformed model's. (How the transform
    moves the logits is tests/models/test_transforms.py's: a smoke fit's network is too flat
    for its temperature to matter here.)"""
    record = _records(one_file_run)["ts_ft"]
    outputs = one_file_run / "data"
    store = ResultStore(outputs / "07_model_output/results", outputs / "06_models/final",
                        outputs / "07_model_output/curves")  # fmt: skip
    model = store.model(record["job_key"])
    assert isinstance(model, TransformedModel) and model.transform_name == "temperature"
    sequence = next(iter(SequenceStore(outputs / "03_primary/sequences").values()))
    engine = Engine.model_validate(record["engine"])

    def nll(split: str, temperature: float) -> float:
        data = TensorSplit.from_arrays(*sequence.step(-1).split(split))
        logits = predict_logits(model.network, data, engine) / temperature
        return torch.nn.functional.cross_entropy(logits, data.y).item()

    fitted = model.transform.temperature.item()
    assert fitted > 0
    assert nll("valid", fitted) <= min(nll("valid", fitted * 1.5), nll("valid", fitted / 1.5))
    assert record["test_nll"] == pytest.approx(nll("test", fitted), rel=1e-5)


def test_the_pages_test_of_a_mode_on_its_own_passes(tmp_path):
    """The page's test of V-REx, run by pytest in a fresh process beside the page's package."""
    for name, text in FILES.items():
        if name.startswith(("my_methods/", "tests_of_my_methods/")):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "KEDRO_DISABLE_TELEMETRY": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "tests_of_my_methods/test_vrex.py"]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "1 passed" in result.stdout


def test_the_pages_line_counts_are_the_benchmarks_and_the_files_own():
    spec = importlib.util.spec_from_file_location("extension_lines", BENCHMARK)
    counting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(counting)
    for name, before, now, yaml_before in counting.rows():
        assert f"| {name} | {before} → {now} | {yaml_before} → 0 |" in TEXT
        code = [line for line in FILES[f"one_file/{name}.py"].splitlines()
                if line.strip() and not line.strip().startswith("#")]  # fmt: skip
        assert now == len(code) and before > now
