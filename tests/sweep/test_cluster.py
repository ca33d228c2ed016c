"""Where a sweep's workers come from: local CPU workers forked from one preloaded server, a
scheduler someone started, whose address is checked first, or a batch system's jobs, whose
scripts are read here (a real SLURM runs them in test_slurm.py)."""

import logging
import os
import socket
import sys
import time
from pathlib import Path

import dask
import pytest
import yaml
from distributed import Client, LocalCluster

from seq2final.core.errors import Seq2FinalError
from seq2final.sweep.cluster import (
    FORKSERVER_PRELOAD,
    ClusterSpec,
    SubmitErrors,
    SweepSettings,
    _refused,
    forked_local_workers,
    jobqueue_options,
    walltime_seconds,
    worker_lifetime,
)
from seq2final.sweep.work import TrainingWorker

PRELOADED = (*FORKSERVER_PRELOAD, "torch", "mlflow", "seq2final.pipelines.adapt_final.nodes")


def _worker_state() -> tuple[int, list[str]]:
    return os.getppid(), [name for name in PRELOADED if name not in sys.modules]


def test_local_workers_are_forked_from_a_server_that_imported_the_project():
    method = "distributed.worker.multiprocessing-method"
    spawned = dask.config.get(method)
    with forked_local_workers(None, SweepSettings()):
        assert dask.config.get(method) == "forkserver"
        with (
            LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0",
                         silence_logs=logging.WARNING) as cluster,
            Client(cluster) as client,
        ):  # fmt: skip
            [(parent, missing)] = client.run(_worker_state).values()
    assert dask.config.get(method) == spawned  # only while the sweep's cluster lives
    # its parent is the fork server, not this process, and the project came with the fork
    assert parent != os.getpid() and missing == []
    for scheduler, cluster in (("tcp://127.0.0.1:1", "local"), (None, "slurm")):
        settings = SweepSettings(cluster=ClusterSpec(type=cluster))
        with forked_local_workers(scheduler, settings):  # workers started elsewhere: unchanged
            assert dask.config.get(method) == spawned


def test_an_address_where_nothing_listens_is_refused_at_once_and_others_left_to_dask():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert _refused(f"tcp://127.0.0.1:{port}") is None
        assert _refused(f"127.0.0.1:{port}") is None  # Dask's default protocol
    assert _refused(f"tcp://127.0.0.1:{port}") == "Connection refused"
    assert _refused("tcp://no-such-host.invalid:8786")  # the name server's reason
    for other in (f"tls://127.0.0.1:{port}", "inproc://127.0.0.1/1/2", "tcp://127.0.0.1"):
        assert _refused(other) is None  # another protocol, no port: Dask says what it says


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
    ],
)  # fmt: skip
def test_a_walltime_reads_as_its_batch_system_reads_it(kind, text, seconds):
    """SLURM reads a bare number as minutes and M:S, LSF [H:]M, PBS and SGE [[H:]M:]S."""
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
        ({"minimum_jobs": 3, "maximum_jobs": 2}, r"minimum_jobs 3 is above maximum_jobs 2: "
                                                 r"valid is 0..2"),
    ]  # fmt: skip
    for fields, message in bad:
        with pytest.raises(Seq2FinalError, match=message):
            jobqueue_options(ClusterSpec(type="slurm", **fields))


def test_a_worker_at_its_lifetime_finishes_its_task_then_leaves():
    """At its lifetime a training worker pauses (nothing new is sent to it), finishes the task
    it runs, once, and leaves; a task submitted meanwhile waits for another worker."""
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(1)
        client.register_plugin(TrainingWorker(1, lifetime=0.5))
        started = _STARTED
        started.clear()
        running = client.submit(_slow, 2.0, pure=False)  # runs past the lifetime
        time.sleep(1.0)
        assert _statuses(client) == ["paused"]
        waiting = client.submit(_slow, 0.0, pure=False)
        assert running.result(timeout=10) == 2.0 and len(started) == 1  # not cut, not re-run
        running.release()  # as the sweep's driver does with what it has settled
        deadline = time.monotonic() + 10
        while _statuses(client) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _statuses(client) == [] and waiting.status == "pending"
        cluster.scale(2)  # a new worker (the spec still names the one that left) runs what waited
        assert waiting.result(timeout=30) == 0.0 and len(started) == 2


_STARTED: list[float] = []  # what _slow was started with, in this process's threaded workers


def _slow(seconds: float) -> float:
    _STARTED.append(seconds)
    time.sleep(seconds)
    return seconds


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


def test_a_training_worker_past_its_memory_pause_threshold_still_runs_tasks():
    """Dask pauses a worker whose process passes 80 % of its memory limit, until Dask-held data
    is freed; a training task's memory is torch's, so a paused sweep worker would wait for good.
    Here a worker of a 200 MB limit shares this test process (far above it): without the
    plugin it pauses and runs nothing, with it the task runs."""
    with LocalCluster(n_workers=1, processes=False, memory_limit="200MB",
                      dashboard_address=":0") as cluster, Client(cluster) as client:  # fmt: skip
        client.wait_for_workers(1)
        deadline = time.monotonic() + 10
        while _statuses(client) != ["paused"] and time.monotonic() < deadline:
            time.sleep(0.1)
        paused = client.submit(sum, [1, 2], pure=False)
        with pytest.raises(TimeoutError):
            paused.result(timeout=3)
        assert _statuses(client) == ["paused"]
        client.register_plugin(TrainingWorker(1))
        assert client.submit(sum, [1, 3], pure=False).result(timeout=10) == 4


def _statuses(client: Client) -> list[str]:
    return [w["status"] for w in client.scheduler_info()["workers"].values()]


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
