"""MLflow tracking on a tiny digits sequence, with MLflow pointed at a temporary SQLite file."""

import json
import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from mlflow import MlflowClient
from mlflow.entities import ViewType
from result_records import make_record
from store_opener import open_store

from seq2final.config.parameters import MlflowOptions, TuningOptions
from seq2final.core.errors import Seq2FinalError
from seq2final.methods import ModeBlock
from seq2final.runs import execution, planner
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.runs.sequence_store import SequenceStore
from seq2final.tracking.display import COMPARISON_FILTER, metric_value
from seq2final.tracking.jobs import JobTracker
from seq2final.tracking.mlflow_io import (
    EXPERIMENT_DESCRIPTION,
    NOTE,
    experiment_id,
    trash_empty_default_experiment,
)
from seq2final.tracking.names import render_name, safe_name
from seq2final.tracking.pyfunc import ImageClassifier, predict_probabilities
from seq2final.tracking.summary import SequenceSummary
from seq2final.training.engine import Engine
from seq2final.training.search import Budget

TINY = {
    "sequence": "source100:rotation60:corruption100:label_flip60",
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
    "arch": "convnet_1",
}
PIPELINES = ["build_sequences", "pretrain_historical", "adapt_final"]
SUMMARY = {
    "test_accuracy", "worst_class_accuracy", "test_nll", "ece", "valid_accuracy", "epochs",
    "trials", "wall_seconds", "parameter_count",
}  # fmt: skip
TAGS = {"sequence", "arch", "method", "family", "seed", "budget", "device", "code_version"}


def _run(run_kedro, pipelines=PIPELINES, **params):
    return run_kedro(pipelines, **{**TINY, **params})


def _client(project) -> MlflowClient:
    return MlflowClient(f"sqlite:///{project / 'mlflow.db'}")


def _job_runs(client, status=None):
    experiment = client.get_experiment_by_name(f"seq2final/{safe_name(TINY['sequence'])}")
    if experiment is None:
        return []
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'job'", max_results=100)
    return [r for r in runs if status is None or r.info.status == status]


def test_a_job_is_one_run_with_params_metrics_histories_trials_and_a_registered_model(
    project, run_kedro, stores_of
):
    _run(run_kedro, method="lp_ft")
    client = _client(project)
    (run,) = _job_runs(client)
    record = stores_of(project).results[run.data.tags["job_key"]]
    assert run.info.status == "FINISHED"
    assert run.data.tags.keys() >= TAGS
    assert (run.data.tags["method"], run.data.tags["family"]) == ("lp_ft", "class 2")
    assert run.data.params["historical"] == "erm" and run.data.params["final"] == "lp_ft"
    assert run.data.params["sequence_key"] == record.sequence_key
    assert '"label_flip"' in run.data.params["sequence_spec"]
    for stage, values in record.hyperparameters.items():
        assert float(run.data.params[f"hp.{stage}.lr"]) == pytest.approx(values["lr"])
    assert run.data.metrics.keys() >= SUMMARY
    # Metrics show 4 significant digits of their values: the test accuracy is correct / test
    # size so rounded, not the float32 mean widened to float64 that the record keeps.
    correct = round(record.test_accuracy * record.test_size)
    assert run.data.metrics["test_accuracy"] == float(f"{correct / record.test_size:.4g}")
    for name in SUMMARY - {"parameter_count"}:
        assert run.data.metrics[name] == metric_value(getattr(record, name))
    # compute: the job's own training and, apart, the ERM state it continues (shared with FT)
    # ... shown in GFLOP (the record keeps the counts)
    assert run.data.metrics["train_gflop"] == metric_value(record.train_flops / 1e9) > 0
    assert "train_flops" not in run.data.metrics
    erm = record.historical_flops.states[record.historical_state]
    assert run.data.metrics["historical_train_gflop"] == metric_value(erm / 1e9) > 0

    # Histories: one step per epoch of the fit that made the model (LP-FT's second stage),
    # plus every stage under its own name.
    curves = stores_of(project).results.learning_curves(record.job_key)
    final_rows = curves[curves["stage"] == "all"]
    history = client.get_metric_history(run.info.run_id, "curve/valid_accuracy")
    assert [m.step for m in history] == list(final_rows["epoch"])
    assert [m.value for m in history] == [metric_value(v) for v in final_rows["valid_accuracy"]]
    head = client.get_metric_history(run.info.run_id, "stages/head/valid_loss")
    assert len(head) == (curves["stage"] == "head").sum()

    # Trials nest under the job run with their Optuna state.
    trials = client.search_runs(
        [run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'"
    )
    expected = sorted(
        (fit.stage, t.number, t.state) for fit in record.fits for t in fit.trial_summaries
    )
    got = sorted(
        (t.data.tags["stage"], int(t.data.params["trial"]), t.data.tags["trial_state"])
        for t in trials
    )
    assert got == expected and len(got) == record.trials
    assert all(t.info.status == "FINISHED" for t in trials)  # smoke trials all complete
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"learning_curves.png", f"{record.job_key}.json"} <= artifacts
    # ... under the project, at a path relative to it (see the moved-project test)
    assert run.info.artifact_uri == f"mlruns/{run.info.experiment_id}/{run.info.run_id}/artifacts"
    assert (project / run.info.artifact_uri / "learning_curves.png").is_file()
    # the curves as the metrics show them, 4 significant digits; the store keeps them raw
    shown = pd.read_csv(project / run.info.artifact_uri / f"{record.job_key}.csv")
    assert shown["valid_accuracy"].tolist() == [metric_value(v) for v in curves["valid_accuracy"]]
    assert all(v != v or v == float(f"{v:.4g}") for v in shown["valid_loss"])  # NaN: epoch 0
    assert not curves["valid_loss"].dropna().eq(shown["valid_loss"].dropna()).all()

    # The registered model predicts exactly what the in-memory model predicts, NHWC or NCHW.
    name = f"{safe_name(TINY['sequence'])}.convnet_1.lp_ft"
    loaded = mlflow.pyfunc.load_model(f"models:/{name}/1")
    images = np.random.default_rng(1).integers(0, 256, size=(7, 3, 32, 32), dtype=np.uint8)
    in_memory = predict_probabilities(
        stores_of(project).results.model(record.job_key), images, "unit", record.eval_step
    )
    assert np.array_equal(loaded.predict(images), in_memory)
    assert np.array_equal(loaded.predict(images.transpose(0, 2, 3, 1)), in_memory)
    assert in_memory.shape == (7, 10) and np.allclose(in_memory.sum(axis=1), 1, atol=1e-5)
    # ... and on the final step's test images (NHWC, as users hold them) it scores the recorded
    # test accuracy, so its preprocessing is the evaluation's.
    sequence = SequenceStore(project / "data/03_primary/sequences")[record.sequence_key]
    x_test, y_test = sequence.step(-1).split("test")
    predicted = loaded.predict(x_test.transpose(0, 2, 3, 1)).argmax(axis=1)
    assert np.mean(predicted == y_test) == pytest.approx(record.test_accuracy, abs=1e-6)
    info = mlflow.models.get_model_info(f"models:/{name}/1")
    assert info.signature.inputs.inputs[0].type == np.dtype(np.uint8)
    # The model is MLflow 3's LoggedModel of the job run (the experiment's *Models* tab, the
    # run's "Logged models"), carrying the run's test accuracy, and the registered version's source.
    (logged,) = client.search_logged_models([run.info.experiment_id])
    assert logged.source_run_id == run.info.run_id
    assert (logged.name, str(logged.status)) == ("lp_ft", "READY")  # its method, as in the tables
    # ... whose registered version the run page's *Logged models* table names, as MLflow's own
    # register_model records it
    assert json.loads(logged.tags["mlflow.modelVersions"]) == [{"name": name, "version": "1"}]
    assert [o.model_id for o in client.get_run(run.info.run_id).outputs.model_outputs] == [
        logged.model_id
    ]
    assert {m.key: m.value for m in logged.metrics}["test_accuracy"] == (
        run.data.metrics["test_accuracy"]
    )
    version = client.get_model_version(name, "1")
    assert (version.source, version.run_id) == (logged.model_uri, run.info.run_id)
    assert logged.artifact_location.startswith(f"mlruns/{run.info.experiment_id}/models/")
    assert "torch==" in (project / logged.artifact_location / "requirements.txt").read_text()


def test_rerunning_a_finished_job_adds_no_run_and_untracked_jobs_are_logged_later(
    project, run_kedro
):
    _run(run_kedro, method="baseline", mlflow={"enabled": False})
    assert not (project / "mlflow.db").exists()  # off means off, kedro-mlflow's run included
    _run(run_kedro, ["adapt_final"], method="baseline")  # reused job, logged from the store
    _run(run_kedro, ["adapt_final"], method="baseline")
    client = _client(project)
    (run,) = _job_runs(client)
    assert run.info.status == "FINISHED" and run.data.metrics.keys() >= SUMMARY
    assert len(client.search_registered_models()) == 1
    _run(run_kedro, ["adapt_final"], method="baseline", force=True)  # recomputed: a new run
    runs = _job_runs(client, "FINISHED")
    assert len(runs) == 2
    assert client.get_run(run.info.run_id).data.tags["superseded_by"] != run.info.run_id
    # the comparison view lists the job once: its latest run; the old model says it is replaced
    (shown,) = client.search_runs([run.info.experiment_id], COMPARISON_FILTER)
    assert shown.info.run_id == client.get_run(run.info.run_id).data.tags["superseded_by"]
    old = client.get_logged_model(run.data.tags["logged_model"])
    assert old.tags["superseded_by"] == shown.info.run_id
    assert "superseded_by" not in client.get_logged_model(shown.data.tags["logged_model"]).tags


def test_a_model_that_cannot_be_registered_ends_failed_with_its_run(
    project, run_kedro, monkeypatch
):
    """The logged model is READY only once linked, measured and registered."""
    from mlflow.exceptions import MlflowException

    def refuse(*args, **kwargs):
        raise MlflowException("the registry is down")

    monkeypatch.setattr(MlflowClient, "create_model_version", refuse)
    with pytest.raises(Exception, match="the registry is down"):
        _run(run_kedro, method="baseline")
    client = _client(project)
    (run,) = _job_runs(client)
    (logged,) = client.search_logged_models([run.info.experiment_id])
    assert (run.info.status, str(logged.status)) == ("FAILED", "FAILED")


def test_a_job_that_trains_no_epoch_says_why_it_has_no_learning_curves(project, run_kedro):
    """NCM's head is the class means: no epoch, no curve, and its run's description says so."""
    _run(run_kedro, method=["ncm"])
    client = _client(project)
    (job,) = _job_runs(client)
    assert job.data.tags[NOTE].endswith(
        "It has no learning curves: its final mode `ncm` trains no epoch on the final step."
    )
    artifacts = {a.path for a in client.list_artifacts(job.info.run_id)}
    assert "learning_curves.png" not in artifacts


def test_a_job_asked_for_under_two_names_is_one_run_named_as_in_the_tables(
    project, run_kedro, monkeypatch
):
    """On a ConvNet ``st_1`` and ``st_b`` are one job, which the tables call ``st_1``: so do its
    run's tag, name and registered model, and a search for ``tags.kind = 'job'`` finds it once.
    The run is planned once (by the pipeline), the tracking hook's check before work included."""
    plans = []
    original = planner.plan_run

    def counted(*args, **kwargs):
        plans.append(args[1])
        return original(*args, **kwargs)

    for module in [m for n, m in list(sys.modules.items()) if n.startswith("seq2final")]:
        if getattr(module, "plan_run", None) is original:
            monkeypatch.setattr(module, "plan_run", counted)
    _run(run_kedro, method=["st_b", "st_1"])
    assert len(plans) == 1
    client = _client(project)
    (job,) = _job_runs(client)
    assert (job.data.tags["method"], job.data.tags["aliases"]) == ("st_1", "st_b")
    assert job.data.params["method"] == "st_1"
    assert job.info.run_name.startswith("st_1 · convnet_1")
    assert job.data.tags[NOTE].startswith("ST-1 (`st_1`, also `st_b`) on ")
    sequence = safe_name(TINY["sequence"])
    models = client.search_registered_models()
    assert [m.name for m in models] == [f"{sequence}.convnet_1.st_1"]
    (version,) = client.search_model_versions(f"name = '{sequence}.convnet_1.st_1'")
    assert version.description.startswith("st_1 on ")
    # Every run says what it is; only job runs answer the README's comparison filter.
    experiment = client.get_experiment_by_name(f"seq2final/{sequence}")
    runs = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL)
    assert {r.data.tags.get("kind") for r in runs} == {"job", "trial", "summary"}
    assert len(runs) == 1 + job.data.metrics["trials"] + 1  # the summary: the examples figure
    assert experiment.tags[NOTE] == EXPERIMENT_DESCRIPTION


def test_sessions_open_no_run_of_their_own_and_leave_no_empty_default_experiment(project):
    """A ``kedro run`` adds only job, trial and summary runs: kedro-mlflow's run of the pipeline
    (its parameters as text, no metrics) is not made, nor its experiment; MLflow's own empty
    ``Default`` goes to the trash. Sessions one after another in one process (a script running
    several protocols) leave no run active."""
    from kedro.framework.session import KedroSession

    from seq2final.core.startup import bootstrap_once

    bootstrap_once(project)
    for protocol in ("final", "eval_fix"):
        runtime = {**TINY, "method": "baseline", "protocol": protocol}
        with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as s:
            s.run(pipeline_names=["build_sequences"])
        assert mlflow.active_run() is None
    client = _client(project)
    # neither "seq2final" nor "Default": the sequence's own, whose one run is its summary (the
    # examples figure build_sequences drew)
    (experiment,) = client.search_experiments()
    assert experiment.name == f"seq2final/{safe_name(TINY['sequence'])}"
    runs = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL)
    assert [r.data.tags["kind"] for r in runs] == ["summary"]
    (default,) = client.search_experiments(view_type=ViewType.DELETED_ONLY)
    assert (default.experiment_id, default.name) == ("0", "Default")
    assert client.search_runs(["0"], run_view_type=ViewType.ALL) == []


def test_a_default_experiment_with_runs_or_outside_the_project_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.create_run("0")
    trash_empty_default_experiment(client)
    assert client.get_experiment("0").lifecycle_stage == "active"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the store is not this project's own
    shared = MlflowClient(f"sqlite:///{tmp_path / 'shared.db'}")
    trash_empty_default_experiment(shared)
    assert shared.get_experiment("0").lifecycle_stage == "active"


def test_a_moved_copy_of_the_project_reads_its_own_artifacts(tmp_path, monkeypatch):
    """Artifact paths are stored relative to the project, so a copy reads its own files, and
    a store made with absolute paths is made relative the next time its experiment is used."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    monkeypatch.chdir(first)
    client = MlflowClient(f"sqlite:///{first / 'mlflow.db'}")
    summary = SequenceSummary(client, MlflowOptions(), "s", "digits", 1)
    summary.log_text("tables", {"table.md": "first"})
    run = client.get_run(summary.run_id)
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.artifact_location == f"mlruns/{experiment.experiment_id}"
    assert run.info.artifact_uri == f"mlruns/{experiment.experiment_id}/{run.info.run_id}/artifacts"
    assert experiment.tags[NOTE] == EXPERIMENT_DESCRIPTION
    assert "models:/s.digits.<arch>@best" in run.data.tags[NOTE]

    shutil.copytree(first, second)
    (second / run.info.artifact_uri / "tables" / "table.md").write_text("second")
    monkeypatch.chdir(second)
    moved = MlflowClient(f"sqlite:///{second / 'mlflow.db'}")
    (listed,) = moved.list_artifacts(run.info.run_id, "tables")
    assert listed.path == "tables/table.md"
    assert (
        Path(moved.download_artifacts(run.info.run_id, "tables/table.md")).read_text() == "second"
    )

    # A store made before (absolute paths, as MLflow writes them) is made relative.
    old = moved.create_experiment("old")
    assert moved.get_experiment(old).artifact_location == f"{second}/mlruns/{old}"
    old_run = moved.create_run(old).info.run_id
    old_model = moved.create_logged_model(old, source_run_id=old_run).model_id
    moved.create_registered_model("old_model")
    previous = mlflow.get_tracking_uri()  # MLflow reads a models:/ source through this process's
    mlflow.set_tracking_uri(f"sqlite:///{second / 'mlflow.db'}")  # URI, as `kedro run` sets it
    try:
        moved.create_model_version("old_model", f"models:/{old_model}", old_run, model_id=old_model)
    finally:
        mlflow.set_tracking_uri(previous)
    assert experiment_id(moved, "old") == old
    assert moved.get_experiment(old).artifact_location == f"mlruns/{old}"
    assert moved.get_run(old_run).info.artifact_uri == f"mlruns/{old}/{old_run}/artifacts"
    where = f"mlruns/{old}/models/{old_model}/artifacts"
    assert moved.get_logged_model(old_model).artifact_location == where
    with closing(sqlite3.connect(second / "mlflow.db")) as db:
        assert db.execute("SELECT storage_location FROM model_versions").fetchall() == [(where,)]


def test_metrics_are_logged_to_four_significant_digits_and_whole_numbers_as_they_are():
    """float32 metrics widened to float64 and float64 ones alike show 4 significant digits;
    counts, FLOPs and what is not finite are logged as they are."""
    assert metric_value(float(torch.tensor(37.0) / 40)) == 0.925
    assert metric_value(np.float32(1) / np.float32(3)) == 0.3333
    assert metric_value(0.15011541754938662) == 0.1501
    assert metric_value(0.9632998759998372) == 0.9633
    assert metric_value(7 / 9) == 0.7778 and metric_value(12.3456789) == 12.35
    for value in (0.1, 0.5, 0.0, float(2**30), 123456789, 21.6e9):
        assert metric_value(value) == value
    assert isinstance(metric_value(np.int64(3)), float)
    assert np.isnan(metric_value(float("nan")))


def test_a_job_that_raises_leaves_a_failed_run(project, run_kedro, monkeypatch):
    def broken(*args):
        raise RuntimeError("diverged")

    monkeypatch.setattr(execution, "fit_job", broken)
    with pytest.raises(Exception, match="diverged"):
        _run(run_kedro, method="baseline")
    (run,) = _job_runs(_client(project))
    assert run.info.status == "FAILED" and "diverged" in run.data.tags["error"]
    assert "test_accuracy" not in run.data.metrics


@pytest.mark.parametrize(
    ("params", "uri", "message"),
    [
        ({}, "sqlite:////proc/nope/mlflow.db", "tracking URI 'sqlite:////proc/nope/mlflow.db'"),
        ({}, "http://127.0.0.1:9", "tracking URI 'http://127.0.0.1:9'"),
        ({"mlflow": {"registered_model": "{sequence}/{method}"}}, None, "refuses the registered"),
        ({"mlflow": {"registered_model": "{model}"}}, None, "mlflow.registered_model"),
        ({"mlflow": {"experiment": "x/{arch_name}"}}, None, "mlflow.experiment"),
    ],
)
def test_bad_tracking_settings_stop_before_any_work(
    project, run_kedro, point_mlflow_at, params, uri, message
):
    if uri:
        point_mlflow_at(project, uri)
    with pytest.raises(Seq2FinalError, match=message) as error:
        _run(run_kedro, method="baseline", **params)
    assert "\n" not in str(error.value)
    assert not any(p.is_file() for p in (project / "data").rglob("*"))


def test_an_mlflow_yml_that_does_not_fit_kedro_mlflows_schema_is_one_line(project, run_kedro):
    (project / "conf" / "test" / "mlflow.yml").write_text(
        f"server:\n  mlflow_tracking_uri: sqlite:///{project / 'mlflow.db'}\n  tracking_uri: x\n"
    )
    with pytest.raises(Seq2FinalError, match="mlflow.yml: 'server.tracking_uri'") as error:
        _run(run_kedro, method="baseline")
    assert "\n" not in str(error.value)
    assert not any(p.is_file() for p in (project / "data").rglob("*"))


def test_runs_started_together_on_a_fresh_store_all_open_it(tmp_path):
    # Both open a fresh store at once: one builds it, the other waits for it under the lock.
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    processes = [
        context.Process(target=open_store, args=(tmp_path, barrier), daemon=True) for _ in range(2)
    ]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
    finally:
        for process in processes:
            process.terminate()
    assert [p.exitcode for p in processes] == [0, 0]
    assert (tmp_path / "mlflow.db.lock").exists()  # beside the database, as opened from there
    assert MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()


def test_a_null_tracking_uri_is_named_as_the_environment_gives_it(
    project, run_kedro, point_mlflow_at, monkeypatch
):
    """``mlflow_tracking_uri: null`` makes kedro-mlflow read ``MLFLOW_TRACKING_URI``."""
    point_mlflow_at(project, "null")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////proc/nope/env.db")
    with pytest.raises(Seq2FinalError, match="tracking URI 'sqlite:////proc/nope/env.db'"):
        _run(run_kedro, method="baseline")


def test_classifier_takes_both_layouts_and_refuses_others():
    classifier = ImageClassifier((3, 8, 6), "unit", None)
    nchw = np.zeros((2, 3, 8, 6), dtype=np.uint8)
    assert classifier.to_nchw(nchw) is nchw
    assert classifier.to_nchw(nchw.transpose(0, 2, 3, 1)).shape == (2, 3, 8, 6)
    with pytest.raises(Seq2FinalError, match="8×6×3"):
        classifier.to_nchw(np.zeros((2, 6, 8, 3), dtype=np.uint8))
    with pytest.raises(Seq2FinalError, match="uint8"):
        classifier.to_nchw(nchw.astype(np.float32))


def test_names_are_made_safe_for_the_registry():
    assert safe_name("source100:rotation60/x") == "source100-rotation60-x"
    fields = {"sequence": "a:b", "arch": "resnet_3"}
    assert render_name("{sequence}.{arch}", "x", fields) == "a-b.resnet_3"


def test_each_trial_is_a_child_run_whose_status_says_how_the_trial_ended(tmp_path):
    """Finished, pruned and failed Optuna trials end FINISHED, KILLED and FAILED, nested under the
    job's run, with the exact Optuna state as a tag."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    plan = RunPlan(
        sequence_key="s-digits-seed1-0", sequence_name="s", dataset="digits", data_path=None,
        arch="convnet_1", seed=1, budget_name="smoke", budget=Budget(sampler="random", trials=2, max_epochs=1),
        engine=Engine(), tuning=TuningOptions(), force=False, states=[], jobs=[],
    )  # fmt: skip
    job = JobPlan("job", "ft", ("ft",), "erm", "ft", None, ModeBlock("final_modes.ft"))
    example = np.zeros((1, 3, 8, 8), np.uint8)
    tracker = JobTracker(client, plan, "{}", example, 2)
    parent = tracker.start(job)
    widened = float(np.float32(0.925))  # a float32 accuracy, as the records keep it
    trials = [
        {"number": 0, "state": "COMPLETE", "params": {"lr": 1e-3}, "value": widened,
         "valid_curve": [0.1, widened]},
        {"number": 1, "state": "PRUNED", "params": {"lr": 1e-2}, "value": None,
         "valid_curve": [0.1]},
        {"number": 2, "state": "FAIL", "params": {"lr": 1e-1}, "value": None, "valid_curve": []},
    ]  # fmt: skip
    fit = {"stage": "final", "params": {"lr": 1e-3}, "valid_accuracy": widened, "best_epoch": 1,
           "epochs": 1, "trials": 2, "trial_summaries": trials}  # fmt: skip
    record = make_record(method="ft", fits=[fit])
    tracker._log_trials(parent, job, record)
    experiment = client.get_experiment_by_name("seq2final/s").experiment_id
    children = client.search_runs([experiment], filter_string="tags.kind = 'trial'")
    ended = {
        run.data.params["trial"]: (run.info.status, run.data.tags["trial_state"])
        for run in children
        if run.data.tags["mlflow.parentRunId"] == parent
    }
    assert ended == {
        "0": ("FINISHED", "COMPLETE"), "1": ("KILLED", "PRUNED"), "2": ("FAILED", "FAIL"),
    }  # fmt: skip
    finished = next(run for run in children if run.data.params["trial"] == "0")
    assert finished.data.metrics["valid_accuracy"] == 0.925
    history = client.get_metric_history(finished.info.run_id, "curve/valid_accuracy")
    assert [m.value for m in history] == [0.1, 0.925]
    assert {run.data.tags["kind"] for run in children} == {"trial"}


def test_a_registered_model_of_a_plugin_architecture_loads_in_a_fresh_process(tmp_path):
    """The pyfunc model imports the run's plugins before rebuilding its network, so a model whose
    architecture a plugin registered loads where that plugin is importable."""
    (tmp_path / "probe_lab.py").write_text(
        "from seq2final.models import BlockGeometry, BlockModel, ClassifierHead, ConvBN, Stem\n"
        "from seq2final.models import architecture\n\n\n"
        "@architecture('probe_net', family='probe', side_modules=('block',))\n"
        "def probe_net(num_classes, dropout):\n"
        "    blocks = [(ConvBN(64, 16, 2), BlockGeometry(64, 16, 2))]\n"
        "    head = ClassifierHead(16, num_classes)\n"
        "    return BlockModel('probe_net', 'probe', Stem(), blocks, head, dropout)\n"
    )
    save = (
        "import pickle, sys, torch\n"
        "import probe_lab\n"
        "from seq2final.models import build_model\n"
        "from seq2final.models.storage import pack\n"
        "from seq2final.tracking.pyfunc import ImageClassifier\n"
        "torch.save(pack(build_model('probe_net', 4)), sys.argv[1] + '/model.pt')\n"
        "classifier = ImageClassifier((3, 32, 32), 'unit', None, ('probe_lab',))\n"
        "open(sys.argv[1] + '/classifier.pkl', 'wb').write(pickle.dumps(classifier))\n"
    )
    load = (
        "import pickle, sys, types, numpy as np\n"
        "classifier = pickle.loads(open(sys.argv[1] + '/classifier.pkl', 'rb').read())\n"
        "classifier.load_context(types.SimpleNamespace(artifacts={'model': sys.argv[1] + "
        "'/model.pt'}))\n"
        "images = np.zeros((2, 32, 32, 3), np.uint8)\n"
        "print(classifier.predict(None, images).shape)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for script in (save, load):
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(2, 4)"
