"""Where a sweep's workers come from: local CPU workers forked from one preloaded server, or a
scheduler someone started, whose address is checked first."""

import logging
import os
import socket
import sys

import dask
import pytest
from distributed import Client, LocalCluster

from seq2final.core.errors import Seq2FinalError
from seq2final.sweep.cluster import (
    FORKSERVER_PRELOAD,
    ClusterSpec,
    SweepSettings,
    _refused,
    forked_local_workers,
    jobqueue_options,
)

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
