"""``evaluate`` + ``visualize`` after every method on a tiny sequence, with MLflow tracking on
(the ``every_method_run`` project of ``conftest.py``)."""

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient
from result_records import make_record

from seq2final.methods import paper_columns
from seq2final.models.weights import scale_side_modules
from seq2final.pipelines.visualize import nodes
from seq2final.reporting import plots
from seq2final.reporting.interpolation import accuracy, path_key
from seq2final.reporting.tables import shown_name
from seq2final.training.records import ResultRecord
from seq2final.training.tensors import TensorSplit

FOLDER = "source100-rotation60-corruption100-label_flip60-digits"
FIGURES = ("interpolation", "projection", "svcca", "adjacency", "heatmap", "learning_curve")


def _records(project: Path) -> dict[str, ResultRecord]:
    records = [ResultRecord.model_validate_json(p.read_bytes()) for p in (project / "data/07_model_output/results").glob("*.json")]  # fmt: skip
    return {shown_name(r): r for r in records}


def test_every_figure_is_written_as_png_and_pdf(every_method_run):
    for name in FIGURES:
        folder = every_method_run / f"data/08_reporting/{name}_figures/{FOLDER}"
        for suffix in ("png", "pdf"):
            files = list(folder.rglob(f"*.{suffix}"))
            assert files, f"no {suffix} for {name}"
            assert all(f.stat().st_size > 1000 for f in files)
    for name in ("interpolation", "heatmap"):  # the plotly twins kedro-viz previews
        assert json.loads((every_method_run / f"data/08_reporting/{name}.json").read_text())["data"]


def test_interpolation_endpoints_are_the_two_models_test_accuracies(every_method_run, stores_of):
    records = _records(every_method_run)
    stores = stores_of(every_method_run)
    results, states = stores.results, stores.states
    sequence = stores.sequences[records["ft"].sequence_key]
    test = TensorSplit.from_arrays(*sequence.step(-1).split("test"))
    paths = every_method_run / "data/07_model_output/interpolation"
    drawn = {}
    for name, record in records.items():
        path = pd.read_csv(paths / f"{path_key(record, 3)}.csv")
        if len(path):
            drawn[name] = path
            assert path["test_accuracy"].iloc[-1] == pytest.approx(record.test_accuracy)
    assert {"ft", "lp_ft", "sft", "ewc", "st_1", "sst_1", "jm", "jst_1"} <= set(drawn)
    assert not {"baseline", "erm", "oracle"} & set(drawn)  # trained from scratch: no path
    engine = records["ft"].engine
    erm = states[records["ft"].historical_state].chains["main"].last
    assert drawn["ft"]["test_accuracy"].iloc[0] == pytest.approx(accuracy(erm, test, engine, None))
    # ST-1's path starts at its final model with the side modules at 0, which computes its step
    # T-1: ERM's layers, whose BatchNorm statistics kept moving in train mode while the side
    # modules trained (training.freeze_bn_stats), so ERM itself only where the fit kept epoch 0
    side = results.model(records["st_1"].job_key)
    step = records["st_1"].eval_step
    assert drawn["st_1"]["test_accuracy"].iloc[0] == pytest.approx(
        accuracy(scale_side_modules(side, step, 0.0), test, engine, step)
    )
    joint = results.model(records["jm"].job_key)
    step = records["jm"].eval_step
    assert drawn["jm"]["test_accuracy"].iloc[0] == pytest.approx(
        accuracy(joint, test, engine, step - 1)
    )


def test_the_summary_run_holds_the_tables_and_figures_and_best_points_at_the_best_job(
    every_method_run, monkeypatch, tmp_path
):
    monkeypatch.chdir(every_method_run)  # artifact locations are relative to the project
    mlflow.set_tracking_uri(f"sqlite:///{every_method_run / 'mlflow.db'}")
    client = MlflowClient()
    (summary,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.kind = 'summary'"
    )
    artifacts = {a.path for a in client.list_artifacts(summary.info.run_id, f"tables/{FOLDER}")}
    assert f"tables/{FOLDER}/smoke-per_arch.md" in artifacts
    # its CSV tables as MLflow shows metrics: 4 significant digits (the run's own files: raw)
    logged = pd.read_csv(client.download_artifacts(
        summary.info.run_id, f"tables/{FOLDER}/smoke-per_arch.csv", str(tmp_path)))  # fmt: skip
    numbers = logged.select_dtypes("float").stack()
    assert len(numbers) and all(v != v or v == float(f"{v:.4g}") for v in numbers)
    heatmaps = client.list_artifacts(summary.info.run_id, f"figures/heatmap_figures/{FOLDER}")
    assert [a.path.rsplit("/", 1)[1] for a in heatmaps] == ["smoke-heatmap.png"]
    # MLflow's copy is the file the catalog wrote, not the figure drawn once more
    copy = client.download_artifacts(summary.info.run_id, heatmaps[0].path, str(tmp_path))
    written = every_method_run / f"data/08_reporting/heatmap_figures/{FOLDER}/smoke-heatmap.png"
    assert Path(copy).read_bytes() == written.read_bytes()
    # ... and every figure the run made, the sequence's examples (build_sequences) included
    made = {
        f"figures/{p.relative_to(every_method_run / 'data/08_reporting').as_posix()}"
        for p in (every_method_run / "data/08_reporting").glob("*_figures/**/*.png")
    }
    assert any(m.startswith("figures/sequence_figures/") for m in made)
    assert _artifacts(client, summary.info.run_id, "figures") >= made
    records = _records(every_method_run)
    adapted = {n: r for n, r in records.items() if n != "oracle"}
    best = max(adapted.values(), key=lambda r: r.valid_accuracy).valid_accuracy
    version = client.get_model_version_by_alias(
        f"{records['ft'].sequence}.digits.convnet_1".replace(":", "-"), "best"
    )
    assert adapted[version.tags["method"]].valid_accuracy == best
    comparisons = pd.read_csv(
        every_method_run / f"data/08_reporting/result_tables/{FOLDER}/smoke-comparisons.csv"
    )
    assert set(comparisons["method"]) == set(records) - {"baseline"}
    assert (comparisons["reference"] == "baseline").all() and (comparisons["pairs"] == 1).all()


def _artifacts(client: MlflowClient, run_id: str, folder: str) -> set[str]:
    """Every file under ``folder`` of a run's artifacts."""
    files = set()
    for entry in client.list_artifacts(run_id, folder):
        files |= _artifacts(client, run_id, entry.path) if entry.is_dir else {entry.path}
    return files


def _spec(records: dict[str, dict]) -> SimpleNamespace:
    """What the plotting nodes read of a sequence spec: its name and dataset."""
    record = next(iter(records.values()))
    return SimpleNamespace(name=record.sequence, dataset=record.dataset)


def test_the_learning_curve_overview_has_a_panel_per_job(every_method_run):
    folder = every_method_run / f"data/08_reporting/learning_curve_figures/{FOLDER}/curves"
    records = _records(every_method_run)
    for suffix in ("png", "pdf"):
        (overview,) = folder.glob(f"overview-smoke-convnet_1-seed*.{suffix}")
        assert overview.stat().st_size > 1000
    # beside the per-job figures, one for each job with a curve (NCM's closed-form head has none)
    fitted = [r for r in records.values() if r.trials]
    assert len(fitted) < len(records)
    assert len(list(folder.glob("*.png"))) == len(fitted) + 1


def test_the_visualize_nodes_leave_no_figure_open_and_no_panel_empty(every_method_run, stores_of):
    """Kedro holds every figure a node returns until its dataset saves them: made with pyplot,
    26 jobs' curves held 26 figures open and pyplot warned past 20."""
    records = _records(every_method_run)
    stores = stores_of(every_method_run)
    spec = _spec(records)
    before = plt.get_fignums()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "More than 20 figures")
        outputs = [
            nodes.plot_learning_curves(list(records.values()), stores.results, spec),
            nodes.plot_projections(list(records.values()), stores.results, stores.states, spec),
            nodes.plot_compute(list(records.values()), spec),
            nodes.plot_heatmaps(list(records.values()), spec, "smoke")[0],
            nodes.plot_adjacency_sweep(list(records.values()), spec),
        ]
    assert plt.get_fignums() == before
    curves, projections = outputs[0], outputs[1][0]
    (overview,) = [f for k, f in curves.items() if "/overview-" in k]
    assert len(overview.axes) == len([r for r in records.values() if r.trials])
    assert projections
    for figure in projections.values():
        assert figure.axes and all(axis.lines for axis in figure.axes)  # no empty panel


class _Curves:
    """A result store that only has learning curves."""

    def __init__(self, empty: set[str]) -> None:
        self.empty = empty

    def learning_curves(self, key: str) -> pd.DataFrame:
        epochs = 0 if key in self.empty else 3
        return pd.DataFrame({"stage": ["fit"] * epochs, "epoch": range(epochs),
                             "train_loss": 1.0, "train_accuracy": 0.4,
                             "valid_loss": 1.0, "valid_accuracy": 0.5})  # fmt: skip


def test_thirty_jobs_make_one_overview_per_group_in_registry_order():
    methods = [*paper_columns(), "plugin_a", "plugin_b", "plugin_c", "plugin_d"]
    records = [make_record(job_key=f"k{i}", method=m, budget="smoke", arch="convnet_4", seed=0)
               for i, m in enumerate(reversed(methods))]  # fmt: skip
    records.append(make_record(job_key="v", method="ft", budget="smoke", arch="convnet_4",
                               seed=0, view={"name": "0-2", "steps": [0, 1, 2]}))  # fmt: skip
    spec = SimpleNamespace(name="digits_clr", dataset="digits")
    before = plt.get_fignums()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "More than 20 figures")
        figures = nodes.plot_learning_curves(records, _Curves({"k0"}), spec)
    assert plt.get_fignums() == before
    folder = "digits_clr-digits/curves"
    overview = figures[f"{folder}/overview-smoke-convnet_4-seed0"]
    shown = [m for m in methods if m != "plugin_d"]  # k0: the last record, no curves yet
    assert [axis.get_title() for axis in overview.axes] == shown
    (note,) = [t.get_text() for t in overview.texts if t.get_text().startswith("no panel")]
    assert note.replace("\n", " ").startswith("no panel: plugin_d (no epoch trained")
    views = figures[f"{folder}/overview-smoke-convnet_4-seed0-views"]
    assert [axis.get_title() for axis in views.axes] == ["ft · steps 0-2"]
    assert len(figures) == len(records) - 1 + 2  # k0 has no curve to draw: no figure of its own
    assert not any(key.endswith("-plugin_d") for key in figures)


def test_a_heatmap_cell_an_architecture_trains_as_another_methods_job_names_it():
    """On a ConvNet ``st_b`` is ``st_1``'s job: its empty cell says ``= st_1``; a cell empty
    for want of a result (``ft`` on the ResNet here) stays blank."""
    means = pd.DataFrame(
        {"st_1": [0.5, 0.4], "st_b": [float("nan"), 0.3], "ft": [0.7, float("nan")]},
        index=["convnet_4", "resnet_1"],
    )
    same = nodes._same_jobs(means)
    assert same == {("st_b", "convnet_4"): "st_1"}
    figure = plots.result_heatmap(means, "t", same)
    (axis,) = [a for a in figure.axes if a.get_yticklabels()[0].get_text() == "st_1"]
    assert [t.get_text() for t in axis.texts if t.get_text().startswith("=")] == ["= st_1"]
    assert axis.get_xlabel().startswith("“= m”")
    plt.close(figure)
