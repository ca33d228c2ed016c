"""Optuna and MLflow on a real PostgreSQL (started by the suite), shared by racing workers."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import torch
from click.testing import CliRunner
from mlflow import MlflowClient

from seq2final.cli import cli
from seq2final.config.parameters import MlflowOptions
from seq2final.core.liveness import current_process
from seq2final.sweep.services import free_port, start_mlflow_server, stop_process
from seq2final.tracking.mlflow_io import experiment_id
from seq2final.tracking.summary import SequenceSummary
from seq2final.training.epochs import FitResult
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tuner import Tuner

BIN = Path(sys.executable).parent
SPACE = SearchSpace.parse({"lr": {"grid": [1e-3], "low": 1e-4, "high": 1e-2, "log": True}}, "test")


def objective(calls, interrupt_at=None):
    def run(params, seed, report):
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        calls.append(params)
        report(1, params["lr"])
        return FitResult(params["lr"], 1, 1, []), {"w": torch.tensor([params["lr"]])}

    return run


def test_an_optuna_study_on_postgresql_resumes_without_repeating_trials(postgres, tmp_path):
    url = postgres.url_of("optuna")
    budget = Budget(sampler="tpe", trials=5, max_epochs=1)
    first, second, whole = [], [], []
    with pytest.raises(KeyboardInterrupt):
        Tuner(budget, url, tmp_path, seed=2).tune("pg-study", SPACE, objective(first, 2))
    tuned = Tuner(budget, url, tmp_path, seed=2).tune("pg-study", SPACE, objective(second))
    assert len(first) == 2 and len(second) == 3 and tuned.finished_trials == 5
    Tuner(budget, None, tmp_path / "journal", seed=2).tune("pg-study", SPACE, objective(whole))
    assert whole == first + second  # the same draws as an uninterrupted study elsewhere


def test_only_trials_whose_worker_is_gone_are_failed(postgres, tmp_path):
    url = postgres.url_of("optuna")
    budget = Budget(sampler="random", trials=2, max_epochs=1)
    tuner = Tuner(budget, url, tmp_path, seed=0)
    study = tuner._study("shared")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    here = current_process()
    trials = {}
    for name, worker in {
        "dead here": f"{here.host}:{dead}:1",  # its process is gone: failed at once
        "live here": str(here),  # this process: never failed
        "elsewhere, beating": "other-host:1:1",  # another host, fresh heartbeat: left alone
        "elsewhere, silent": "other-host:2:1",  # another host, heartbeat too old: failed
    }.items():
        trial = study.ask()
        trial.set_user_attr("worker", worker)
        tuner.storage.record_heartbeat(trial._trial_id)
        trials[name] = trial.number
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.execute(
            sqlalchemy.text(
                "update trial_heartbeats set heartbeat = heartbeat - interval '1 hour' "
                "where trial_id = :trial"
            ),
            {"trial": study.trials[trials["elsewhere, silent"]]._trial_id},
        )
    tuner._fail_stale(study)
    states = {name: study.trials[number].state.name for name, number in trials.items()}
    assert states == {
        "dead here": "FAIL",
        "live here": "RUNNING",
        "elsewhere, beating": "RUNNING",
        "elsewhere, silent": "FAIL",
    }


@pytest.fixture(scope="module")
def mlflow_server(postgres, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlflow")
    backend = postgres.url_of("mlflow")
    server, url = start_mlflow_server(backend, folder / "mlruns", log_path=folder / "server.log")
    yield url
    stop_process(server)


def test_racing_workers_create_one_experiment_and_one_summary_run(mlflow_server):
    client = MlflowClient(mlflow_server)
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: experiment_id(client, "race/exp"), range(8)))
    assert len(ids) == 1
    options = MlflowOptions(experiment="race/{sequence}")

    def summary_run(_):
        return SequenceSummary(MlflowClient(mlflow_server), options, "seq", "digits", 1).run_id

    with ThreadPoolExecutor(8) as pool:
        runs = set(pool.map(summary_run, range(8)))
    assert len(runs) == 1
    experiment = client.get_experiment_by_name("race/seq")
    alive = client.search_runs([experiment.experiment_id], "tags.kind = 'summary'")
    assert [r.info.run_id for r in alive] == list(runs)


def sweep(project, *args):
    return subprocess.run(
        [str(BIN / "kedro"), "sweep", "--env", "test", "--sequences", "source100:rotation60",
         "--archs", "convnet_1", "--budget", "smoke", *args],
        cwd=project, capture_output=True, text=True,
        env={**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"},
    )  # fmt: skip


def test_a_family_sweeps_on_a_separate_scheduler_with_optuna_and_mlflow_on_postgresql(
    project, postgres, mlflow_server, dask_cluster
):
    """``--sequences`` with ``@*`` and ``intensities`` in ``--params``: each member a sequence of
    the graph, then the ``robustness`` pipeline over them (docs/intensity.md). The driver runs in
    this process (the command line's own start: test_sweep.py) on a running cluster; Optuna's
    studies and MLflow's runs go to PostgreSQL."""
    family = "source100:rotation@*/60"
    storage = postgres.url_of("optuna")
    params = (
        "build_sequences.test_size=50,build_sequences.oracle_size=120,intensities=[0,90],"
        f"tuning.storage={storage},mlflow.tracking_uri={mlflow_server}"
    )
    dry = CliRunner().invoke(cli, ["sweep", "--env", "test", "--sequences", family,
                                   "--methods", "ft,baseline", "--params", params,
                                   "--dry-run"])  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert f"Families: {family} at intensities [0, 90]" in dry.output
    assert "2 sequences (0 done), 2 states (0 done), 4 jobs (0 done)" in dry.output
    # with shared history, the members' one history trains one state: FT's ERM model
    done = CliRunner().invoke(cli, ["sweep", "--env", "test", "--sequences", family,
                                    "--budget", "smoke", "--methods", "baseline,ft",
                                    "--archs", "convnet_1",
                                    "--scheduler", dask_cluster, "--params",
                                    f"{params},pretrain_historical.shared_history=true"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "ran 2 sequence, 1 state, 4 job, " in done.output
    records = [
        json.loads(p.read_text()) for p in (project / "data/07_model_output/results").glob("*.json")
    ]
    assert {r["sequence"] for r in records} == {
        "source100:rotation@0/60",
        "source100:rotation@90/60",
    }
    ft = [r for r in records if r["method"] == "ft"]
    assert len(ft) == 2 and len({r["historical_state"] for r in ft}) == 1
    folder = "data/08_reporting/robustness_reports/source100-rotation@I-60-digits/"
    assert f"Robustness: {folder}" in done.output
    assert (project / folder / "smoke-slopes.md").exists()
    # each member was measured before the family was read: its slopes are on the 1-NN distance too
    assert len(list((project / "data/04_feature/shift_distances").glob("*.csv"))) == 2
    assert "| baseline | convnet_1 | nn1 |" in (project / folder / "smoke-slopes.md").read_text()
    # the stores: every job's study in PostgreSQL, every job one finished run on the server
    keys = {r["job_key"] for r in records}
    assert not (project / "data/06_models/optuna/journal.log").exists()
    studies = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    assert all(any(key in name for name in studies) for key in keys)
    client = MlflowClient(mlflow_server)
    experiments = [e.experiment_id for e in client.search_experiments()]
    jobs = client.search_runs(experiments, "tags.kind = 'job'")
    assert {r.data.tags["job_key"] for r in jobs} == keys
    # an experiment per member sequence, holding that member's jobs
    sequence_of = {r["job_key"]: r["sequence"] for r in records}
    by_experiment: dict[str, set[str]] = {}
    for run in jobs:
        by_experiment.setdefault(run.info.experiment_id, set()).add(
            sequence_of[run.data.tags["job_key"]]
        )
    assert sorted(len(s) for s in by_experiment.values()) == [1, 1]
    assert all(r.info.status == "FINISHED" and r.inputs.dataset_inputs for r in jobs)
    assert not (project / "mlflow.db").exists()  # nothing went to the project's SQLite


def test_an_unreachable_scheduler_or_database_stops_in_one_line(project, postgres):
    """The unreachable database in this process: it is refused while the run is planned, as the
    scheduler is, before any process or service starts."""

    def sweep_here(*args):
        return CliRunner().invoke(cli, ["sweep", "--env", "test", "--sequences",
                                        "source100:rotation60", "--archs", "convnet_1",
                                        "--budget", "smoke", "--methods", "baseline", *args])  # fmt: skip

    port = free_port()  # from the real command line, whose stderr Dask's logs could reach
    done = sweep(project, "--methods", "baseline", "--scheduler", f"tcp://127.0.0.1:{port}",
                 "--params", "build_sequences.test_size=50,mlflow.enabled=false")  # fmt: skip
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"Error: Dask scheduler tcp://127.0.0.1:{port} is unreachable")
    nowhere = postgres.url.replace(str(postgres.port), str(free_port()))
    done = sweep_here("--workers", "1", "--params",
                      f"build_sequences.test_size=50,mlflow.enabled=false,tuning.storage={nowhere}")  # fmt: skip
    [line] = [line for line in done.output.splitlines() if line.startswith("Error:")]
    assert done.exit_code != 0
    assert line.startswith("Error: parameter 'tuning.storage': cannot open"), line
    assert not (project / "data/03_primary").exists()
