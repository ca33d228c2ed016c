"""Where a sweep's workers come from: local CPU workers forked from one preloaded server, or a
scheduler someone started, whose address is checked first (a batch system's jobs: test_batch.py
and, on a real SLURM, test_slurm.py)."""

import logging
import os
import socket
import sys

import dask
from distributed import Client, LocalCluster

from seq2final.sweep.batch import ClusterSpec
from seq2final.sweep.cluster import (
    FORKSERVER_PRELOAD,
    SweepSettings,
    _refused,
    forked_local_workers,
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
