"""The README's comparison recipe, run on the suite's every-method project (``every_method_run``
in ``conftest.py``): the saved view each experiment carries, the rows it lists and the counts the
README quotes."""

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

from mlflow import MlflowClient

from seq2final.tracking.display import (
    COMPARISON_COLUMNS,
    COMPARISON_VIEW,
    SHARED_VIEW,
    comparison_view,
    ui_url,
)

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _quoted(pattern: str) -> int:
    match = re.search(pattern, README.replace("\n", " "))
    assert match, f"the README no longer says {pattern!r}"
    return int(match.group(1))


@functools.cache
def _shipped() -> dict[str, tuple[list[str], int]]:
    """Per architecture of the README's recipe and the suite's run: the methods seq2final ships
    and the jobs a run of all of them trains (its plan's distinct mode pairs), asked in a fresh
    interpreter, as the suite's own plugin (``tests/lab_extras.py``) adds a method to this
    process's registry (and to the every-method run where a test imported it first)."""
    code = (
        "import json; from seq2final.methods.requests import requested_jobs as asked; "
        "print(json.dumps({a: ([x.requested for x in j], len({(x.historical, x.final) for x in "
        "j})) for a in ('convnet_1', 'convnet_4', 'resnet_1') for j in [asked(None, None, None, "
        "a)]}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {arch: (names, jobs) for arch, (names, jobs) in json.loads(out.stdout).items()}


def _jobs(arch: str) -> int:
    return _shipped()[arch][1]


def test_the_saved_view_lists_one_row_per_job_with_the_columns_it_names(every_method_run):
    client = MlflowClient(f"sqlite:///{every_method_run / 'mlflow.db'}")
    (experiment,) = client.search_experiments()
    envelope = json.loads(experiment.tags[f"{SHARED_VIEW}{COMPARISON_VIEW}"])
    assert envelope["name"] == "Compare methods"
    state = json.loads(envelope["state"])
    rows = client.search_runs(
        [experiment.experiment_id], state["searchFilter"], max_results=1000,
        order_by=["metrics.test_accuracy DESC"],
    )  # fmt: skip
    everything = client.search_runs([experiment.experiment_id], "", max_results=1000)
    records = list((every_method_run / "data/07_model_output/results").glob("*.json"))
    # One row per job, no trial and no summary run among them, though the experiment has both.
    assert len(rows) == len(records) < len(everything)
    shipped = [r for r in rows if r.data.tags["method"] in _shipped()["convnet_1"][0]]
    assert len(shipped) == _jobs("convnet_1")
    assert len({r.data.tags["method"] for r in rows}) == len(rows)
    assert {r.data.tags["kind"] for r in everything} == {"job", "trial", "summary"}
    # Every column the view shows is a value of every row (a blank column compares nothing).
    for column in COMPARISON_COLUMNS:
        kind, name = re.fullmatch(r"(\w+)\.`(.+)`", column).groups()
        if kind != "attributes":
            assert all(name in getattr(r.data, kind) for r in rows), column
    # One full-width chart that names every method (MLflow's bar card never labels its bars),
    # from the method to the four numbers the table reads; 500 pixels high, all of it on screen
    # under MLflow's header at a 1000-pixel window (measured on a screenshot)
    (chart,) = state["compareRunCharts"]
    assert chart["type"] == "PARALLEL" and chart["showAllRuns"]
    assert chart["selectedParams"] == ["arch", "method"]
    assert chart["selectedMetrics"] == [
        "test_accuracy", "valid_accuracy", "worst_class_accuracy", "ece"
    ]  # fmt: skip
    assert all(p in rows[0].data.params for p in chart["selectedParams"])
    assert all(m in rows[0].data.metrics for m in chart["selectedMetrics"])
    (section,) = state["compareRunSections"]
    assert chart["metricSectionId"] == section["uuid"]
    assert (section["columns"], section["cardHeight"]) == (1, 500) and state["runListHidden"]
    # The columns a comparison reads come right after MLflow's two pinned ones, and fit the
    # runs table at a 1600-pixel window with MLflow's Assistant panel open (940 pixels, measured
    # on a screenshot; 40 of them the row's checkbox).
    order = state["columnOrder"]
    read = ["tags.`method`", "tags.`arch`", "metrics.`test_accuracy`",
            "metrics.`valid_accuracy`", "metrics.`worst_class_accuracy`", "metrics.`ece`"]  # fmt: skip
    assert order[:8] == ["attributes.`Run Name`", "runDateAndNestInfo", *read]
    assert set(order) == set(COMPARISON_COLUMNS) | {"attributes.`Run Name`",
                                                    "runDateAndNestInfo", "duration"}  # fmt: skip
    assert 40 + sum(state["columnWidths"][c] for c in order[:8]) <= 940
    # The experiment link a run prints opens this view.
    assert ui_url("sqlite:///mlflow.db", experiment.experiment_id).endswith(
        f"&viewStateShareKey={COMPARISON_VIEW}"
    )
    # Every adapted model is a logged model of its job run: the *Models* tab lists them all.
    logged = client.search_logged_models([experiment.experiment_id], max_results=1000)
    assert sorted(m.source_run_id for m in logged) == sorted(r.info.run_id for r in rows)


def test_the_counts_the_readme_quotes_are_the_plans():
    """A ConvNet (the default `convnet_4`, the suite's `convnet_1`) trains 27 jobs for 30
    methods, a ResNet 30; the README's two-architecture recipe adds them up."""
    one = _quoted(r"\(one architecture, `convnet_4`\) it lists \*\*(\d+)\*\* rows")
    two = _quoted(r"the view lists \*\*(\d+)\*\* rows")
    resnet = _quoted(r"on a ResNet: (\d+) more jobs")
    assert one == _jobs("convnet_4") == _jobs("convnet_1")
    assert resnet == _jobs("resnet_1") and two == one + resnet
    assert len(_shipped()["convnet_4"][0]) == _quoted(r"the (\d+) methods less")


def test_the_view_is_added_once_a_users_edit_or_deletion_stays(tmp_path, monkeypatch):
    from seq2final.tracking.mlflow_io import experiment_id

    monkeypatch.chdir(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    made = experiment_id(client, "seq2final/s")
    tag = f"{SHARED_VIEW}{COMPARISON_VIEW}"
    assert json.loads(client.get_experiment(made).tags[tag])["name"] == "Compare methods"
    client.set_experiment_tag(made, tag, comparison_view(1).replace("Compare methods", "Mine"))
    experiment_id(client, "seq2final/s")
    assert json.loads(client.get_experiment(made).tags[tag])["name"] == "Mine"
    older = client.create_experiment("seq2final/old")  # made before experiments had the view
    experiment_id(client, "seq2final/old")
    assert tag in client.get_experiment(older).tags
    client.delete_experiment_tag(older, tag)  # a user deleted it: it stays deleted
    experiment_id(client, "seq2final/old")
    assert tag not in client.get_experiment(older).tags
