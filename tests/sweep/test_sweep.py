"""``kedro sweep`` for real: local clusters, failures, a killed worker and driver, two runs at once.

A sweep on a separately started cluster is in test_shared_stores.py.

Each test runs the command as a user types it, in a copy of the project, with tiny digits data:
through the console script where the process is what is tested (a driver killed, two runs at
once), else through the same command object in the test's process.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
from click.testing import CliRunner
from kedro.framework.cli.cli import KedroCLI
from mlflow import MlflowClient

from seq2final.cli import cli
from seq2final.methods import FINAL_MODES
from tests.temporal_images import write_images

TINY = "build_sequences.test_size=50,build_sequences.oracle_size=120"
SEQUENCE = "source100:rotation60"
RESULTS = "data/07_model_output/results"
BIN = Path(sys.executable).parent


def kedro(project, *args, **popen):
    """The console script, started in ``project`` (``popen``: how its output is taken)."""
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    command = [str(BIN / "kedro"), *args]
    return subprocess.Popen(command, cwd=project, env=env, text=True, **popen)


def records(project):
    return {p.stem: json.loads(p.read_text()) for p in (project / RESULTS).glob("*.json")}


@pytest.mark.waits
def test_a_sweep_on_two_local_workers_finishes_and_a_second_run_trains_nothing(project):
    dry = CliRunner().invoke(cli, ["sweep", "--env", "test", "--sequences", SEQUENCE,
                                   "--archs", "convnet_1,convnet_2", "--methods", "ft,baseline",
                                   "--params", TINY, "--dry-run"])  # fmt: skip
    assert dry.exit_code == 0, dry.output
    assert "1 sequences (0 done), 2 states (0 done), 4 jobs (0 done)" in dry.output
    assert not (project / "data/03_primary").exists()  # a dry run builds and trains nothing
    # the driver in this process (the command line's own start is tested below and in
    # test_shared_stores.py), its two workers started by Dask
    sweep = ["sweep", "--env", "test", "--sequences", SEQUENCE, "--archs", "convnet_1,convnet_2",
             "--methods", "ft,baseline", "--budget", "smoke", "--params", TINY, "--workers", "2"]  # fmt: skip
    done = CliRunner().invoke(cli, sweep)
    assert done.exit_code == 0, done.output
    assert "Sweep: 1 sequences (0 done), 2 states (0 done), 4 jobs (0 done)" in done.output
    assert "ran 1 sequence, 2 state, 4 job, 1 evaluate" in done.output
    found = records(project)
    assert len(found) == 4
    assert {(r["arch"], r["method"]) for r in found.values()} == {
        (a, m) for a in ("convnet_1", "convnet_2") for m in ("ft", "baseline")
    }
    tables = project / "data/08_reporting/result_tables/source100-rotation60-digits"
    assert (tables / "smoke-per_arch.csv").exists()
    assert "Tables: data/08_reporting/result_table_reports/source100-rotation60-digits/" in (
        done.output
    )
    # Every job logged once, over HTTP, with its sequence as the run's dataset input.
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("seq2final/source100-rotation60")
    jobs = client.search_runs([experiment.experiment_id], "tags.kind = 'job'")
    assert sorted(r.data.tags["job_key"] for r in jobs) == sorted(found)
    assert all(r.info.status == "FINISHED" for r in jobs)
    manifest = next((project / "data/03_primary/sequences").glob("*/manifest.json"))
    digest = json.loads(manifest.read_text())["content_hash"][:12]
    for run in jobs:
        [given] = run.inputs.dataset_inputs
        assert (given.dataset.name, given.dataset.digest) == (SEQUENCE, digest)
    summaries = client.search_runs([experiment.experiment_id], "tags.kind = 'summary'")
    assert len(summaries) == 1

    stamps = {p: p.stat().st_mtime_ns for p in (project / RESULTS).glob("*.json")}
    again = CliRunner().invoke(cli, sweep)
    assert again.exit_code == 0, again.output
    assert "4 jobs (4 done)" in again.output and "Nothing to train" in again.output
    assert {p: p.stat().st_mtime_ns for p in (project / RESULTS).glob("*.json")} == stamps
    # a new session keeps the records but not the models: no state is trained for finished jobs
    shutil.rmtree(project / "data/06_models/historical")
    resumed = CliRunner().invoke(cli, sweep)
    assert resumed.exit_code == 0, resumed.output
    assert "2 states (2 done), 4 jobs (4 done)" in resumed.output
    assert "Nothing to train" in resumed.output
    assert not (project / "data/06_models/historical").exists()


PLUGIN = """
from seq2final.methods import final_mode


@final_mode("explode", "always fails", continues_from=("nothing",), config_keys=())
def explode(ctx, config, state):
    raise RuntimeError("this final mode always fails")
"""


@pytest.fixture
def boom_plugin(tmp_path, monkeypatch, request):
    """``PLUGIN`` importable in this process and on the workers a sweep starts here (a worker
    starts with its driver's ``sys.path``); the final mode it registers is gone afterwards."""
    (tmp_path / "boom_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(FINAL_MODES, "_entries", dict(FINAL_MODES._entries))
    request.addfinalizer(lambda: sys.modules.pop("boom_plugin", None))
    return "boom_plugin"


def test_a_failing_job_is_reported_with_its_log_while_the_others_finish(project, boom_plugin):
    """On a worker the sweep starts, which imports the plugin; the driver in this process."""
    done = CliRunner().invoke(cli, [
        "sweep", "--env", "test", "--sequences", SEQUENCE, "--budget", "smoke",
        "--archs", "convnet_1", "--pairs", "none:scratch,none:explode", "--workers", "1",
        "--params", f"{TINY},mlflow.enabled=false,plugins=[{boom_plugin}]",
    ])  # fmt: skip
    assert done.exit_code == 1, done.output
    failed = [line for line in done.output.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1, done.output
    (line,) = failed
    assert "FAILED job " in line and "none+explode" in line
    assert "this final mode always fails" in line
    log = Path(line.rsplit("(log: ", 1)[1].rstrip(")"))
    assert "RuntimeError: this final mode always fails" in log.read_text()
    assert [r["final"] for r in records(project).values()] == ["scratch"]
    # evaluate still ran, on what finished
    assert (project / "data/08_reporting/result_tables/source100-rotation60-digits").exists()


def test_bad_sweep_input_stops_in_one_line_before_any_work(project):
    def sweep_here(*args):  # in this process: the same command, without a CLI start-up each
        return CliRunner().invoke(cli, ["sweep", "--env", "test", *args])

    cases = [
        (["--archs", "convnet_9"], "--archs: unknown 'convnet_9'; valid: all, convnet_1"),
        (["--methods", "ft,nope"], "--methods: unknown 'nope'; valid: all, oracle"),
        (["--workers", "0"], "--workers 0: needs at least 1 worker"),
        (["--pairs", "erm"], "--pairs item 'erm' must be historical:final"),
        (["--seeds", "1,x"], "--seeds '1,x' must be whole numbers"),
    ]
    for args, message in cases:
        done = sweep_here("--sequences", SEQUENCE, *args)
        assert done.exit_code != 0 and message in done.output, done.output
    # through Kedro's own command line, as `kedro sweep` runs: one line on stderr
    done = CliRunner().invoke(KedroCLI(project), ["sweep", "--env", "test", "--sequences",
                                                  SEQUENCE, "--archs", "convnet_9"])  # fmt: skip
    [line] = done.stderr.strip().splitlines()
    assert done.exit_code != 0 and line.startswith("Error: --archs: unknown 'convnet_9'")
    unknown = sweep_here("--sequences", "nosuch", "--dry-run")
    assert "sequence 'nosuch':" in unknown.output and "unknown" in unknown.output
    for sweep_yml, message in [
        ("cluster: {type: slurm, maximum_jobs: 0}", "sweep.yml: parameter 'cluster.maximum_jobs' = 0: Input should be greater"),
        ("cluster: {type: slurm, jobs: 2}", "sweep.yml: unknown parameter 'cluster.jobs'; valid: type, maximum_jobs, minimum_jobs"),
        ("cluster: {type: slurm, options: {walltime: '00:02:00'}, lifetime: 2m}",
         "sweep.yml cluster.lifetime 120 s + lifetime_stagger 6 s reaches the walltime"),
    ]:  # fmt: skip
        (project / "conf" / "test" / "sweep.yml").write_text(sweep_yml + "\n")
        bad = sweep_here("--sequences", SEQUENCE, "--dry-run")
        assert bad.exit_code != 0 and message in bad.output, bad.output
    assert not (project / "data/03_primary").exists()


def test_without_sequences_a_sweep_takes_the_run_parameters_sequence(
    project, project_parameters, tmp_path
):
    """As --archs and --budget do; --params sets it as for kedro run, a spec with a comma whole."""

    def dry_run(*args):
        return CliRunner().invoke(cli, ["sweep", "--env", "test", "--archs", "convnet_1",
                                        "--methods", "ft", "--dry-run", *args])  # fmt: skip

    default = dry_run()
    assert default.exit_code == 0, default.output
    assert f"Sequence: {project_parameters['sequence']} (the run parameter" in default.output
    assert "Sweep: 1 sequences (0 done), 1 states (0 done), 1 jobs (0 done)" in default.output
    given = dry_run("--params", "sequence=source100:rotation,corruption60")
    assert given.exit_code == 0, given.output
    assert "Sweep: 1 sequences (0 done), 1 states (0 done), 1 jobs (0 done)" in given.output
    assert "\n  source100-rotation-corruption60-digits-seed" in given.output
    write_images(tmp_path / "photos", per_class=2)  # a user's own periods: their sequence
    own = dry_run("--dataset", "folder", "--data-path", str(tmp_path / "photos"),
                  "--seeds", "1,2")  # fmt: skip
    assert own.exit_code == 0, own.output
    assert "Sequence: natural (the periods of dataset folder)" in own.output
    assert "Sweep: 2 sequences (0 done), 2 states (0 done), 2 jobs (0 done)" in own.output
    assert "\n  natural-folder-seed1-" in own.output and "\n  natural-folder-seed2-" in own.output
    assert not (project / "data/03_primary").exists()


def _journal_trials(project):
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(
            str(project / "data/06_models/optuna/journal.log")
        )
    )
    return {
        study.study_name: optuna.load_study(study_name=study.study_name, storage=storage).trials
        for study in optuna.get_all_study_summaries(storage)
    }


SLOW = "budgets.slow.sampler=random,budgets.slow.trials=4,budgets.slow.max_epochs=4"
KILLED = "source100:rotation200"


def _running_after(project, finished, after):
    """(number, worker) of a trial numbered above ``after`` running once ``finished`` trials of
    the study are complete."""
    if not (project / "data/06_models/optuna/journal.log").exists():
        return None
    for trials in _journal_trials(project).values():
        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        live = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
        for trial in live if len(done) >= finished else []:
            worker = trial.user_attrs.get("worker")  # set just after the trial starts
            if worker and trial.number > after:
                return trial.number, worker
    return None


def _wait_for_trial_after(project, finished, process, after=-1):
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
        if running := _running_after(project, finished, after):
            return running
    return None


@pytest.mark.waits
def test_a_killed_worker_then_a_killed_driver_redo_only_their_trials(
    project, copy_project_to, run_kedro_in, tmp_path, monkeypatch
):
    """One sweep, two interruptions: a worker killed mid-trial (Dask runs its task again on a
    new worker, which redoes only that trial), then the driver killed mid-trial (SIGKILL: it
    closes nothing) and the sweep run again. The job ends as the same job run uninterrupted."""
    # trials of a second or two each: a larger final step, no early stopping
    params = f"{TINY},mlflow.enabled=false,{SLOW},training.patience=100"
    args = ("--archs", "convnet_1", "--methods", "baseline", "--workers", "1", "--budget", "slow")
    command = ("sweep", "--env", "test", "--sequences", KILLED, "--params", params)
    driver = kedro(project, *command, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    running = _wait_for_trial_after(project, 1, driver)
    assert running is not None, "no trial was seen running after a finished one"
    killed, worker = running
    os.kill(int(worker.split(":")[-2]), signal.SIGKILL)
    again = _wait_for_trial_after(project, 2, driver, after=killed)  # on the worker replacing it
    assert again is not None and again[1] != worker, "no trial ran after the worker was replaced"
    # the new worker failed the killed trial, and only that one, before it went on
    [trials] = _journal_trials(project).values()
    assert [t.number for t in trials if t.state.name == "FAIL"] == [killed]
    driver.kill()
    driver.communicate(timeout=60)
    rerun = CliRunner().invoke(cli, [*command, *args])  # a new driver, in this process
    assert rerun.exit_code == 0, (rerun.output[-4000:], rerun.exception)
    [record] = records(project).values()
    [trials] = _journal_trials(project).values()
    states = [t.state.name for t in trials]
    # Every finished trial was kept; only the killed worker's trial, and the driver's if its
    # orphaned worker died with it, were run again.
    assert states.count("COMPLETE") == 4 and states.count("FAIL") in (1, 2), states
    assert len(trials) == 4 + states.count("FAIL"), states

    # The same job uninterrupted, in this process (one torch thread, as the workers have).
    whole = copy_project_to(tmp_path / "whole")
    monkeypatch.chdir(whole)
    run_kedro_in(whole, ["build_sequences", "pretrain_historical", "adapt_final"], {
        "sequence": KILLED, "method": "baseline", "arch": "convnet_1",
        "budget": "slow", "mlflow": {"enabled": False}, "training": {"patience": 100},
        "build_sequences": {"test_size": 50, "oracle_size": 120},
        "budgets": {"slow": {"sampler": "random", "trials": 4, "max_epochs": 4}},
    })  # fmt: skip
    [expected] = records(whole).values()
    for field in ("job_key", "test_accuracy", "valid_accuracy", "test_nll", "hyperparameters"):
        assert record[field] == expected[field], field


RUN = ("run", "--env", "test", "--params")


# Some seconds of training per state and job: longer than two processes started together take
# to differ in reaching them.
LONG = (
    "sequence:source100:rotation200,budgets.slow.sampler=random,budgets.slow.trials=4,"
    "budgets.slow.max_epochs=8,training.patience=100,budget:slow"
)


@pytest.mark.waits
def test_a_second_run_waits_for_the_first_and_fails_none_of_its_trials(project, run_kedro):
    """Two processes started together, asking for one historical state and one job: each is
    trained once, by whichever claims it first; the other waits, reuses both, and never fails
    the first's running trials."""
    params = f"{LONG},{TINY},mlflow.enabled=false,method:ft,arch:convnet_1"
    run_kedro(["build_sequences"], sequence="source100:rotation200", arch="convnet_1",
              method="ft", mlflow={"enabled": False},
              build_sequences={"test_size": 50, "oracle_size": 120})  # fmt: skip
    pipelines = "pretrain_historical,adapt_final"
    both = [
        kedro(
            project,
            *RUN,
            params,
            "--pipelines",
            pipelines,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in both]
    assert [run.returncode for run in both] == [0, 0], outputs
    log = (project / "logs/info.log").read_text()
    trained = [
        line for line in log.splitlines() if "historical state" in line and "done in" in line
    ]
    assert len(trained) == 1, trained  # one process trained the state
    assert "waiting for " in log and "exists; reusing it" in log
    assert "finished earlier; reusing it" in log  # and the job, which the other one ran
    assert len(records(project)) == 1
    studies = _journal_trials(project)  # the state's study and the job's: 4 trials each
    assert [[t.state.name for t in trials] for trials in studies.values()] == [["COMPLETE"] * 4] * 2


def test_the_sweep_command_is_a_project_command():
    shown = CliRunner().invoke(cli, ["sweep", "--help"])
    assert shown.exit_code == 0
    for option in ("--sequences", "--archs", "--methods", "--pairs", "--seeds", "--budget",
                   "--dataset", "--data-path", "--workers", "--scheduler", "--dry-run"):  # fmt: skip
        assert option in shown.output


def test_a_family_is_measured_at_every_seed_of_the_sweep_before_it_is_read(
    tmp_path, monkeypatch, project_parameters
):
    """Each seed draws its own members, so each seed's distances are measured (not only the
    run's seed), and so is a member measured before the history's row existed."""
    from seq2final.config.checks import validate_parameters
    from seq2final.sweep import command

    family, intensities = "source100:rotation@*/60:rotation@*/60", [0, 90]
    params = {**project_parameters, "dataset": "digits", "intensities": None}
    ran = []
    monkeypatch.setattr(command, "run_task", lambda project, env, task: ran.append(task))

    def key(intensity, seed):
        sequence = family.replace("*", str(intensity))
        return validate_parameters({**params, "sequence": sequence, "seed": seed}).spec.key

    old = pd.DataFrame({"comparison": ["to_final"] * 3, "nn1": [1.0, 2.0, 3.0]})
    measured = {
        key(0, 1007): pd.concat([old, pd.DataFrame([{"comparison": "history_to_final", "nn1": 2.5}])]),
        key(90, 1007): old,  # measured before the history's row: measured again
    }  # fmt: skip
    command.read_families(
        (family,), intensities, (1007, 1011), params, measured, tmp_path, "test", {"budget": "smoke"}
    )  # fmt: skip
    quantified = [(t.params["sequence"], t.params["seed"]) for t in ran if t.kind == "quantify"]
    assert quantified == [
        (family.replace("*", "0"), 1011),
        (family.replace("*", "90"), 1007),
        (family.replace("*", "90"), 1011),
    ]
    assert [t.kind for t in ran][-1] == "robustness"
