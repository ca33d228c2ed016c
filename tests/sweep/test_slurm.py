"""``kedro sweep`` on a real SLURM: a one-node cluster of Debian's daemons (the ``slurm`` fixture),
its workers started by ``sbatch``, one cancelled mid-task, all of them leaving before a two-minute
walltime, and a sweep whose jobs never start.

Each sweep is the command as a user types it, in a copy of the project with an environment
``slurm_test`` (the ``test`` environment plus a ``sweep.yml`` of ``cluster.type: slurm``).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from omegaconf import OmegaConf

from seq2final.cli import cli
from seq2final.sweep.slurm import job_holding
from seq2final.sweep.work import LIFETIME_REACHED

pytestmark = pytest.mark.waits

TINY = "build_sequences.test_size=50,build_sequences.oracle_size=120"
LONGER = f"{TINY},budgets.smoke.trials=2,budgets.smoke.max_epochs=6"  # a minute's sweep: time
# for a worker to be replaced before it ends
FIVE = ("--sequences", "source100:rotation60", "--archs", "convnet_1",
        "--methods", "baseline,erm,ft,lp_ft,ncm", "--budget", "smoke")  # fmt: skip
RESULTS = "data/07_model_output/results"
BIN = Path(sys.executable).parent


def slurm_env(project: Path, stall_minutes: float = 3, **cluster) -> None:
    """``conf/slurm_test``: the test environment, its sweep on ``cluster``'s SLURM jobs."""
    target = project / "conf" / "slurm_test"
    shutil.copytree(project / "conf" / "test", target)
    options = {"cores": 1, "memory": "3GB", "processes": 1, "walltime": "00:10:00",
               "log_directory": str(project / "logs" / "slurm"),
               "scheduler_options": {"dashboard_address": ":0"}}  # fmt: skip
    options.update(cluster.pop("options", {}))
    sweep = {"cluster": {"type": "slurm", "maximum_jobs": 2, "options": options, **cluster},
             "stall_minutes": stall_minutes}  # fmt: skip
    OmegaConf.save(OmegaConf.create(sweep), target / "sweep.yml")


def jobs(slurm) -> list[tuple[str, str, str]]:
    """Every job SLURM knows, finished ones included: (id, state, reason)."""
    return [tuple(line.split("|")) for line in slurm.queue("%i|%T|%r")]


def records(project: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (project / RESULTS).glob("*.json")}


def test_a_cancelled_worker_is_replaced_and_the_sweep_trains_what_a_local_one_does(
    project, slurm, copy_project_to, tmp_path, monkeypatch
):
    """Two workers' jobs; one is cancelled (``scancel``) while it trains a job: Dask runs that
    task again on the job adaptive scaling submits in its place, and the sweep ends with every
    record, the same keys and accuracies as two local workers' sweep, and SLURM's queue empty."""
    slurm_env(project)
    env = {**os.environ, **slurm.env, "KEDRO_DISABLE_TELEMETRY": "1"}
    started = time.monotonic()
    driver = subprocess.Popen(
        [str(BIN / "kedro"), "sweep", "--env", "slurm_test", *FIVE, "--params", LONGER],
        cwd=project, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        cancelled = None
        while cancelled is None and driver.poll() is None and time.monotonic() - started < 300:
            cancelled = job_holding(f"{project}/logs/sweep/*/job-*.log")  # mid-task
            time.sleep(0.2)
        assert cancelled, "no worker was seen training a job"
        first = {job for job, _, _ in jobs(slurm)}
        subprocess.run(["scancel", cancelled], env=env, check=True)
        output, _ = driver.communicate(timeout=400)
        print(output, jobs(slurm), time.monotonic() - started)  # shown when the test fails
    finally:
        if driver.poll() is None:  # killed, it cancels nothing: its jobs would hold the node
            driver.kill()
            mine = [job for job, state, _ in jobs(slurm) if state in ("PENDING", "RUNNING")]
            subprocess.run(["scancel", *mine], env=env, check=False)
    assert driver.returncode == 0, output[-3000:]
    assert "ran 1 sequence, 1 state, 5 job, 1 evaluate" in output
    assert re.search(r"First worker joined \d+\.\d s after the cluster was asked for", output)
    seen = jobs(slurm)
    assert (cancelled, "CANCELLED", "None") in seen
    assert any(int(job) > max(map(int, first)) for job, _, _ in seen), seen  # its replacement
    assert not [row for row in seen if row[1] in ("PENDING", "RUNNING")]  # the sweep closed all

    local = copy_project_to(tmp_path / "local")
    monkeypatch.chdir(local)
    done = CliRunner().invoke(cli, ["sweep", "--env", "test", *FIVE, "--params", LONGER,
                                    "--workers", "2"])  # fmt: skip
    assert done.exit_code == 0, done.output
    on_slurm, here = records(project), records(local)
    assert sorted(on_slurm) == sorted(here) and len(here) == 5
    for key, record in here.items():  # one machine, one torch thread each: the same bytes
        assert on_slurm[key]["test_accuracy"] == record["test_accuracy"], key


def test_workers_leave_before_a_two_minute_walltime_and_the_sweep_finishes(project, slurm):
    """Every worker leaves at its lifetime (4 s ± 1 s once it has joined), well before the
    jobs' two-minute walltime: it finishes the task it runs, so every task runs once, none is
    cut; its job is replaced while work remains, none is killed at the limit (TIMEOUT), and
    the sweep of five jobs finishes with every record."""
    slurm_env(project, options={"walltime": "00:02:00"}, lifetime="4s", lifetime_stagger="1s")
    before = {job for job, _, _ in jobs(slurm)}
    params = f"{LONGER},mlflow.enabled=false"
    done = subprocess.run(
        [str(BIN / "kedro"), "sweep", "--env", "slurm_test", *FIVE, "--params", params],
        cwd=project, env={**os.environ, **slurm.env, "KEDRO_DISABLE_TELEMETRY": "1"},
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    ours = [row for row in jobs(slurm) if row[0] not in before]
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:], ours)
    assert len(records(project)) == 5
    assert not [row for row in ours if row[1] == "TIMEOUT"], ours
    assert len(ours) >= 3, ours  # replaced
    left = [
        p for p in (project / "logs" / "slurm").glob("*.err") if LIFETIME_REACHED in p.read_text()
    ]
    assert left, "no worker left at its lifetime"
    for log in (project / "logs" / "sweep").glob("*/*.log"):
        text = log.read_text()  # a task run again (its result lost with a worker) reuses it
        reused = text.count("exists; reusing it") + text.count("finished earlier; reusing it")
        assert text.count("Kedro project seq2final") - reused == 1, log.name  # none cut


@pytest.mark.parametrize(
    ("cluster", "word"),
    [
        ({"job_extra_directives": ["--begin=now+1hour"]}, r"job \d+ PENDING \(BeginTime\)"),
        ({"queue": "nosuch"}, r"no batch job of the sweep is in SLURM's queue; last refused "
                              r"submission: sbatch: error: invalid partition specified: nosuch"),
    ],
)  # fmt: skip
def test_a_sweep_whose_jobs_never_start_stops_with_slurms_word(
    project, slurm, monkeypatch, cluster, word
):
    """No worker for ``stall_minutes``: the sweep stops in one line with what SLURM says of its
    jobs (a pending job's reason, a refused submission's error), and leaves none queued."""
    slurm_env(project, stall_minutes=0.1, options=cluster)
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    before = {job for job, _, _ in jobs(slurm)}
    done = CliRunner().invoke(cli, ["sweep", "--env", "slurm_test", *FIVE, "--params", TINY])
    assert done.exit_code != 0
    [line] = [line for line in done.output.splitlines() if "The sweep stopped" in line]
    assert re.search(r"no worker for 0\.\d minutes \(sweep.yml stall_minutes 0\.1\); " + word, line)
    assert not [r for r in jobs(slurm) if r[0] not in before and r[1] in ("PENDING", "RUNNING")]
    assert not records(project)
