"""MLflow tracking on a tiny digits sequence, with MLflow pointed at a temporary SQLite file."""

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient

from seq2final.config.parameters import MlflowOptions
from seq2final.core.errors import Seq2FinalError
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.runs.recipes import JobRecipe
from seq2final.runs.sequence_store import SequenceStore
from seq2final.tracking.jobs import JobTracker
from seq2final.tracking.mlflow_io import store_setup_lock
from seq2final.tracking.names import render_name, safe_name
from seq2final.tracking.pyfunc import ImageClassifier, predict_probabilities
from seq2final.training.engine import Engine

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
    assert run.data.params["sequence_key"] == record["sequence_key"]
    assert '"label_flip"' in run.data.params["sequence_spec"]
    for stage, values in record["hyperparameters"].items():
        assert float(run.data.params[f"hp.{stage}.lr"]) == pytest.approx(values["lr"])
    assert run.data.metrics.keys() >= SUMMARY
    assert run.data.metrics["test_accuracy"] == pytest.approx(record["test_accuracy"])
    # compute: the job's own training and, apart, the ERM state it continues (shared with FT)
    assert run.data.metrics["train_flops"] == record["train_flops"] > 0
    erm = record["historical_flops"]["states"][record["historical_state"]]
    assert run.data.metrics["historical_train_flops"] == erm > 0

    # Histories: one step per epoch of the fit that made the model (LP-FT's second stage),
    # plus every stage under its own name.
    curves = stores_of(project).results.learning_curves(record["job_key"])
    final_rows = curves[curves["stage"] == "all"]
    history = client.get_metric_history(run.info.run_id, "curve/valid_accuracy")
    assert [m.step for m in history] == list(final_rows["epoch"])
    assert [m.value for m in history] == pytest.approx(list(final_rows["valid_accuracy"]))
    head = client.get_metric_history(run.info.run_id, "stages/head/valid_loss")
    assert len(head) == (curves["stage"] == "head").sum()

    # Trials nest under the job run with their Optuna state.
    trials = client.search_runs(
        [run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'"
    )
    expected = sorted(
        (fit["stage"], t["number"], t["state"])
        for fit in record["fits"]
        for t in fit["trial_summaries"]
    )
    got = sorted(
        (t.data.tags["stage"], int(t.data.params["trial"]), t.data.tags["trial_state"])
        for t in trials
    )
    assert got == expected and len(got) == record["trials"]
    assert all(t.info.status == "FINISHED" for t in trials)  # smoke trials all complete
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"learning_curves.png", "model", f"{record['job_key']}.json"} <= artifacts

    # The registered model predicts exactly what the in-memory model predicts, NHWC or NCHW.
    name = f"{safe_name(TINY['sequence'])}.convnet_1.lp_ft"
    loaded = mlflow.pyfunc.load_model(f"models:/{name}/1")
    images = np.random.default_rng(1).integers(0, 256, size=(7, 3, 32, 32), dtype=np.uint8)
    in_memory = predict_probabilities(
        stores_of(project).results.model(record["job_key"]), images, "unit", record["eval_step"]
    )
    assert np.array_equal(loaded.predict(images), in_memory)
    assert np.array_equal(loaded.predict(images.transpose(0, 2, 3, 1)), in_memory)
    assert in_memory.shape == (7, 10) and np.allclose(in_memory.sum(axis=1), 1, atol=1e-5)
    # ... and on the final step's test images (NHWC, as users hold them) it scores the recorded
    # test accuracy, so its preprocessing is the evaluation's.
    sequence = SequenceStore(project / "data/03_primary/sequences")[record["sequence_key"]]
    x_test, y_test = sequence.step(-1).split("test")
    predicted = loaded.predict(x_test.transpose(0, 2, 3, 1)).argmax(axis=1)
    assert np.mean(predicted == y_test) == pytest.approx(record["test_accuracy"], abs=1e-6)
    info = mlflow.models.get_model_info(f"models:/{name}/1")
    assert info.signature.inputs.inputs[0].type == np.dtype(np.uint8)
    requirements = client.download_artifacts(run.info.run_id, "model/requirements.txt")
    assert "torch==" in Path(requirements).read_text()


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


def test_sessions_one_after_another_in_one_process_each_get_their_own_pipeline_run(project):
    """As a script running several protocols does: no run is ended by hand in between."""
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    bootstrap_project(project)
    for protocol in ("final", "eval_fix"):
        runtime = {**TINY, "method": "baseline", "protocol": protocol}
        with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as s:
            s.run(pipeline_names=["build_sequences"])
        assert mlflow.active_run() is None
    client = _client(project)
    pipeline_runs = client.search_runs(
        [client.get_experiment_by_name("seq2final").experiment_id], "params.protocol != ''"
    )
    assert sorted(r.data.params["protocol"] for r in pipeline_runs) == ["eval_fix", "final"]
    assert {r.info.status for r in pipeline_runs} == {"FINISHED"}


def test_a_job_that_raises_leaves_a_failed_run(project, run_kedro, monkeypatch):
    def broken(self):
        raise RuntimeError("diverged")

    monkeypatch.setattr(JobRecipe, "run", broken)
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


def _open_store(project: Path, barrier) -> None:
    os.chdir(project)
    barrier.wait(timeout=60)  # every process opens the fresh store at once
    with store_setup_lock("sqlite:///mlflow.db"):
        MlflowClient("sqlite:///mlflow.db").search_experiments(max_results=1)


def test_runs_started_together_on_a_fresh_store_all_open_it(tmp_path):
    # Without the lock two or three of these processes fail in MLflow's schema migration.
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(3)
    processes = [
        context.Process(target=_open_store, args=(tmp_path, barrier), daemon=True) for _ in range(3)
    ]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
    finally:
        for process in processes:
            process.terminate()
    assert [p.exitcode for p in processes] == [0, 0, 0]
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
        arch="convnet_1", seed=1, budget_name="smoke", budget={"sampler": "random"},
        engine=Engine().model_dump(), tuning={}, force=False, states=[], jobs=[],
    )  # fmt: skip
    job = JobPlan("job", "ft", ("ft",), "erm", "ft", None, {})
    example = np.zeros((1, 3, 8, 8), np.uint8)
    tracker = JobTracker(client, plan, MlflowOptions(), "{}", example, 2)
    parent = tracker.start(job)
    trials = [
        {"number": 0, "state": "COMPLETE", "params": {"lr": 1e-3}, "value": 0.5,
         "valid_curve": [0.1, 0.5]},
        {"number": 1, "state": "PRUNED", "params": {"lr": 1e-2}, "value": None,
         "valid_curve": [0.1]},
        {"number": 2, "state": "FAIL", "params": {"lr": 1e-1}, "value": None, "valid_curve": []},
    ]  # fmt: skip
    tracker._log_trials(parent, job, {"fits": [{"stage": "final", "trial_summaries": trials}]})
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
    assert finished.data.metrics["valid_accuracy"] == 0.5


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
