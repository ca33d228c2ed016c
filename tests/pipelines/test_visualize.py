"""``evaluate`` + ``visualize`` after all 18 methods on a tiny sequence, with MLflow tracking on
(the ``tiny_results`` project of ``conftest.py``)."""

import json
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from seq2final.reporting.interpolation import accuracy, path_key
from seq2final.reporting.tables import shown_name
from seq2final.training.engine import Engine
from seq2final.training.tensors import TensorSplit

FOLDER = "source100-rotation60-corruption100-label_flip60-digits"
FIGURES = ("interpolation", "projection", "svcca", "adjacency", "heatmap", "learning_curve")


def _records(project: Path) -> dict[str, dict]:
    records = [json.loads(p.read_text()) for p in (project / "data/07_model_output/results").glob("*.json")]  # fmt: skip
    return {shown_name(r): r for r in records}


def test_every_figure_is_written_as_png_and_pdf(tiny_results):
    for name in FIGURES:
        folder = tiny_results / f"data/08_reporting/{name}_figures/{FOLDER}"
        for suffix in ("png", "pdf"):
            files = list(folder.rglob(f"*.{suffix}"))
            assert files, f"no {suffix} for {name}"
            assert all(f.stat().st_size > 1000 for f in files)
    for name in ("interpolation", "heatmap"):  # the plotly twins kedro-viz previews
        assert json.loads((tiny_results / f"data/08_reporting/{name}.json").read_text())["data"]


def test_interpolation_endpoints_are_the_two_models_test_accuracies(tiny_results, stores_of):
    records = _records(tiny_results)
    stores = stores_of(tiny_results)
    results, states = stores.results, stores.states
    sequence = stores.sequences[records["ft"]["sequence_key"]]
    test = TensorSplit.from_arrays(*sequence.step(-1).split("test"))
    paths = tiny_results / "data/07_model_output/interpolation"
    drawn = {}
    for name, record in records.items():
        path = pd.read_csv(paths / f"{path_key(record, 3)}.csv")
        if len(path):
            drawn[name] = path
            assert path["test_accuracy"].iloc[-1] == pytest.approx(record["test_accuracy"])
    assert {"ft", "lp_ft", "sft", "ewc", "st_1", "sst_1", "jm", "jst_1"} <= set(drawn)
    assert not {"baseline", "erm", "oracle"} & set(drawn)  # trained from scratch: no path
    engine = Engine(**records["ft"]["engine"])
    erm = states[records["ft"]["historical_state"]].chains["main"].last
    for name in ("ft", "st_1"):  # both start from ERM on the historical steps
        assert drawn[name]["test_accuracy"].iloc[0] == pytest.approx(
            accuracy(erm, test, engine, None)
        )
    joint = results.model(records["jm"]["job_key"])
    step = records["jm"]["eval_step"]
    assert drawn["jm"]["test_accuracy"].iloc[0] == pytest.approx(
        accuracy(joint, test, engine, step - 1)
    )


def test_the_summary_run_holds_the_tables_and_figures_and_best_points_at_the_best_job(tiny_results):
    mlflow.set_tracking_uri(f"sqlite:///{tiny_results / 'mlflow.db'}")
    client = MlflowClient()
    (summary,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.kind = 'summary'"
    )
    artifacts = {a.path for a in client.list_artifacts(summary.info.run_id, f"tables/{FOLDER}")}
    assert f"tables/{FOLDER}/smoke-per_arch.md" in artifacts
    heatmaps = client.list_artifacts(summary.info.run_id, f"figures/heatmap_figures/{FOLDER}")
    assert [a.path.rsplit("/", 1)[1] for a in heatmaps] == ["smoke-heatmap.png"]
    records = _records(tiny_results)
    adapted = {n: r for n, r in records.items() if n != "oracle"}
    best = max(adapted.values(), key=lambda r: r["valid_accuracy"])["valid_accuracy"]
    version = client.get_model_version_by_alias(
        f"{records['ft']['sequence']}.digits.convnet_1".replace(":", "-"), "best"
    )
    assert adapted[version.tags["method"]]["valid_accuracy"] == best
    comparisons = pd.read_csv(
        tiny_results / f"data/08_reporting/result_tables/{FOLDER}/smoke-comparisons.csv"
    )
    assert set(comparisons["method"]) == set(records) - {"baseline"}
    assert (comparisons["reference"] == "baseline").all() and (comparisons["pairs"] == 1).all()
