"""What a sweep asks of a batch system: job scripts as dask-jobqueue writes them (nothing is
submitted; a real SLURM runs them in test_slurm.py), walltimes and lifetimes, and a refused
submission said once."""

import logging
from pathlib import Path

import pytest
import yaml

from seq2final.core.errors import Seq2FinalError
from seq2final.sweep.batch import (
    ClusterSpec,
    SubmitErrors,
    jobqueue_options,
    walltime_seconds,
    worker_lifetime,
)
from seq2final.sweep.cluster import SweepSettings


def _job_script(spec: ClusterSpec) -> str:
    """The batch script dask-jobqueue would submit for ``spec`` (nothing is submitted)."""
    from dask_jobqueue import SLURMCluster

    with SLURMCluster(**jobqueue_options(spec), scheduler_options={"dashboard_address": ":0"}) as c:
        return c.job_script()


def test_a_slurm_job_asks_for_the_gpus_its_workers_declare():
    """Each worker declares GPU=gpus_per_worker (a training task asks for GPU=1) and the job
    asks SLURM for every worker's GPUs; a directive of the user's that asks for enough stays,
    one that asks for too few is refused before any job is queued."""
    base = {"cores": 1, "memory": "2GB"}
    script = _job_script(ClusterSpec(type="slurm", gpus_per_worker=1, options=base))
    assert "#SBATCH --gres=gpu:1\n" in script and "--resources GPU=1" in script
    two = ClusterSpec(type="slurm", gpus_per_worker=2, options={**base, "processes": 2, "cores": 2})
    script = _job_script(two)
    assert "#SBATCH --gres=gpu:4\n" in script and "--resources GPU=2" in script
    assert "--nworkers 2" in script  # the workers whose GPUs the job asks for
    own = {**base, "job_extra_directives": ["--gpus-per-node=a100:2"]}
    script = _job_script(ClusterSpec(type="slurm", gpus_per_worker=2, options=own))
    assert "--gpus-per-node=a100:2" in script and "--gres" not in script
    few = {**base, "job_extra_directives": ["--gres=gpu:1"]}
    with pytest.raises(Seq2FinalError, match=r"asks SLURM for 1 GPU\(s\) per job, but "
                       r"gpus_per_worker 2 × processes 1 needs 2"):  # fmt: skip
        jobqueue_options(ClusterSpec(type="slurm", gpus_per_worker=2, options=few))
    cpu = _job_script(ClusterSpec(type="slurm", options=base))
    assert "gpu" not in cpu.lower() and "--resources" not in cpu


@pytest.mark.parametrize(
    ("kind", "text", "seconds"),
    [
        ("slurm", "12:00:00", 43200), ("slurm", "30", 1800), ("slurm", "5:30", 330),
        ("slurm", "1-12", 129600), ("slurm", "2-00:30:00", 174600), ("slurm", "1-2:3", 93780),
        ("lsf", "00:30", 1800), ("lsf", "45", 2700), ("pbs", "01:00:00", 3600), ("pbs", "90", 90),
        ("sge", "1:30", 90), ("slurm", "soon", None), ("slurm", "1:2:3:4", None),
        ("lsf", "12:30:00", None), ("pbs", "1-12", None),
    ],
)  # fmt: skip
def test_a_walltime_reads_as_its_batch_system_reads_it(kind, text, seconds):
    """SLURM reads a bare number as minutes and M:S, and alone reads days; LSF [H:]M, PBS and SGE
    [[H:]M:]S."""
    assert walltime_seconds(text, kind) == seconds


def test_workers_leave_before_the_walltime_and_bad_lifetimes_stop_before_any_job():
    """Batch workers join once they have imported what tasks import. Without a lifetime,
    workers leave at 90 % ± 5 % of the walltime (the options' or dask-jobqueue's default 30
    minutes); a lifetime given is used as given; one that reaches the walltime, a walltime or
    time that does not read, or a minimum above the maximum, is refused in one line naming it."""
    base = {"cores": 1, "memory": "2GB"}
    twelve = ClusterSpec(type="slurm", options={**base, "walltime": "12:00:00"})
    assert "#SBATCH -t 12:00:00\n" in _job_script(twelve)
    assert worker_lifetime(twelve) == (38880, 2160)  # 10.8 h ± 0.6 h
    default = ClusterSpec(type="slurm", options=base)  # dask-jobqueue's 00:30:00
    assert worker_lifetime(default) == (1620, 90)
    script = _job_script(default)
    assert "--preload seq2final.sweep.preload" in script  # joins once it has imported the project
    assert "--lifetime" not in script  # Dask's would cut the running task (TrainingWorker's waits)
    given = ClusterSpec(type="slurm", options=base, lifetime="20m", lifetime_stagger="1m")
    assert worker_lifetime(given) == (1200, 60)
    assert worker_lifetime(ClusterSpec(type="htcondor", options=base)) is None  # no walltime
    bad = [
        ({"lifetime": "29m"}, r"lifetime 1740 s \+ lifetime_stagger 90 s reaches the walltime "
                              r"00:30:00 \(1800 s\): a worker would be killed mid-task"),
        ({"options": {"walltime": "soon"}}, r"walltime 'soon' is not a slurm walltime: valid is"),
        ({"lifetime": "a while"}, r"cluster.lifetime 'a while' is not a time: valid are Dask's"),
        ({"lifetime_stagger": "-"}, r"lifetime_stagger '-' is not a time: valid are Dask's"),
        ({"lifetime": "0s"}, r"lifetime 0 s is not above its lifetime_stagger 90 s"),
        ({"options": {"walltime": "1-2"}, "type": "pbs"}, r"valid is \[\[H:\]M:\]S"),
        ({"minimum_jobs": 3, "maximum_jobs": 2}, r"minimum_jobs 3 is above maximum_jobs 2: "
                                                 r"valid is 0..2"),
    ]  # fmt: skip
    for fields, message in bad:
        with pytest.raises(Seq2FinalError, match=message):
            jobqueue_options(ClusterSpec(**{"type": "slurm", **fields}))


def test_a_refused_submission_is_said_once_and_other_errors_pass():
    """Dask logs a refused ``sbatch`` each second adaptive scaling tries again: said once, in
    SLURM's words, kept for the stalled sweep's message; any other error is left to logging."""
    said = []
    watch = SubmitErrors(said.append)
    refused = RuntimeError(
        "Command exited with non-zero exit code.\nExit code: 1\nCommand:\nsbatch /tmp/x.sh\n"
        "stdout:\n\nstderr:\nsbatch: error: invalid partition specified: gpu\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    )

    def record(error):
        return logging.LogRecord(
            "x", logging.ERROR, "", 0, "failed", None, (type(error), error, None)
        )

    assert not watch.filter(record(refused)) and not watch.filter(record(refused))
    assert said == ["A batch job was refused: sbatch: error: invalid partition specified: gpu"]
    assert watch.last == "sbatch: error: invalid partition specified: gpu"
    assert watch.filter(record(ValueError("something else")))
    assert watch.filter(logging.LogRecord("x", logging.WARNING, "", 0, "plain", None, None))


def test_the_docs_slurm_settings_are_valid_and_render_what_they_say():
    """docs/scale.md's ``conf/slurm/sweep.yml``, read as the sweep reads it: its lifetime and
    stagger, its GPUs and its walltime reach the job script."""
    text = (Path(__file__).parents[2] / "docs" / "scale.md").read_text()
    block = text.split("put in `conf/slurm/sweep.yml`:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    settings = SweepSettings.model_validate(yaml.safe_load(block))
    assert settings.stall_minutes == 30 and settings.cluster.minimum == 12
    script = _job_script(settings.cluster)
    assert "#SBATCH -t 12:00:00\n" in script and "#SBATCH -p gpu\n" in script
    assert worker_lifetime(settings.cluster) == (39600, 1200)
    assert "#SBATCH --gres=gpu:1\n" in script and "--resources GPU=1" in script
