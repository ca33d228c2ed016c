"""Where a sweep runs: a Dask cluster (local processes, an existing scheduler, or a batch system
through ``dask-jobqueue``) and, for SQLite tracking, one MLflow server its workers log to.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import torch
from distributed import Client, LocalCluster, Nanny, Scheduler, SpecCluster
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.utils import get_mp_context
from pydantic import Field

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.sweep.batch import (
    JOBQUEUE_CLUSTERS,
    ClusterSpec,
    jobqueue,
    jobqueue_options,
    worker_lifetime,
)
from seq2final.sweep.services import start_mlflow_server, stop_process
from seq2final.sweep.work import TrainingWorker
from seq2final.tracking.mlflow_io import store_setup_lock

log = logging.getLogger(__name__)


class SweepSettings(StrictModel):
    """``conf/<env>/sweep.yml``: how a sweep's workers are started (all optional)."""

    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    threads: int = Field(default=1, ge=1)  # torch threads per worker
    stall_minutes: float = Field(default=10.0, gt=0)  # no worker this long stops the sweep


def connect(
    scheduler: str | None, workers: int | None, settings: SweepSettings, threads: int
) -> tuple[Client, Any]:
    """A Dask client and the cluster it owns (None for an existing scheduler's)."""
    if scheduler:
        refused = _refused(scheduler)
        if refused:
            raise Seq2FinalError(f"Dask scheduler {scheduler} is unreachable ({refused})")
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise Seq2FinalError(f"Dask scheduler {scheduler} is unreachable ({reason})") from None
        try:  # its workers decide whether tasks ask for GPUs
            client.wait_for_workers(1, timeout=120)
        except TimeoutError:
            client.close()
            raise Seq2FinalError(
                f"Dask scheduler {scheduler} has no worker (none joined within 120 s)"
            ) from None
        cluster = None
    else:
        client, cluster = None, _start_cluster(workers, settings, threads)
    try:
        if client is None:
            client = Client(cluster)
        lifetime = worker_lifetime(settings.cluster) if settings.cluster.type != "local" else None
        client.register_plugin(TrainingWorker(threads, *(lifetime or ())))
    except BaseException:  # the caller gets nothing to close: close what was started here
        for started in (client, cluster):
            if started is not None:
                started.close()
        raise
    return client, cluster


_NO_SUCH_HOST = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, n)}
"""The name server's answers that a host does not exist (EAI_NODATA is glibc's only)."""


def _refused(scheduler: str) -> str | None:
    """Why nothing answers at a TCP scheduler address now (no such host, nothing listening on
    the port), or None: Dask's client retries a refused connection for its whole timeout,
    seconds of waiting for what a socket says at once, so a scheduler must be listening when
    the sweep connects (docs/scale.md). Other protocols, a host that does not answer and a
    name server that fails for the moment are left to Dask."""
    protocol, location = parse_address(scheduler)
    if protocol != "tcp":
        return None
    try:
        host, port = parse_host_port(location)
        with socket.create_connection((host, port), timeout=5):
            return None
    except ConnectionRefusedError as error:
        return error.strerror
    except socket.gaierror as error:
        return error.strerror if error.errno in _NO_SUCH_HOST else None
    except (OSError, ValueError):
        return None


def _start_cluster(workers: int | None, settings: SweepSettings, threads: int) -> Any:
    """A batch-system cluster adapting between ``cluster.minimum_jobs`` and ``maximum_jobs``
    jobs, or local workers: one per GPU (each seeing only its device) on a CUDA machine, else
    ``workers`` processes."""
    spec = settings.cluster
    if spec.type != "local":
        cluster_class = getattr(jobqueue(), JOBQUEUE_CLUSTERS[spec.type])
        options = jobqueue_options(spec)
        try:
            cluster = cluster_class(**options)
        except (TypeError, ValueError) as error:
            raise Seq2FinalError(f"sweep.yml cluster.options: {error}") from None
        cluster.adapt(minimum_jobs=spec.minimum, maximum_jobs=spec.maximum_jobs)
        return cluster
    gpus = torch.cuda.device_count()
    if gpus:  # one worker per GPU, each seeing only its own device
        count = workers or gpus
        specs = {
            f"gpu-{i}": {
                "cls": Nanny,
                "options": {
                    "nthreads": 1,
                    "env": {"CUDA_VISIBLE_DEVICES": str(i % gpus)},
                    "resources": {"GPU": 1},
                },
            }
            for i in range(count)
        }
        scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
        return SpecCluster(workers=specs, scheduler=scheduler, silence_logs=logging.WARNING)
    return LocalCluster(
        n_workers=workers or 1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.WARNING,
        env={
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "DASK_LOGGING__DISTRIBUTED": "warning",
        },
    )


FORKSERVER_PRELOAD = ("distributed", "seq2final.sweep.preload")
"""What the server a sweep's local workers are forked from imports once (``sweep/preload.py``)."""


@contextlib.contextmanager
def forked_local_workers(scheduler: str | None, settings: SweepSettings) -> Iterator[None]:
    """While the block runs, the local CPU workers this process starts (``--workers``, and
    those Dask starts again after one is lost) are forked from one server process that has
    imported the project, instead of each spawning a new interpreter to import it.

    A spawned worker spends about 10 s of CPU importing torch, MLflow and the pipelines
    before its first task: every worker of a sweep pays it, and a killed worker's replacement
    pays it again. A forked one has them already (docs/architecture.md, "Start-up"). Forking
    after torch has *run* threads is not safe (GNU OpenMP); the server only imports. So the
    thread settings of the workers' environment (``OMP_NUM_THREADS`` below) no longer reach
    libraries the server loaded: each worker sets torch's threads itself
    (:class:`TrainingWorker`). Workers on GPUs keep Dask's spawn: their devices are chosen by
    the environment before CUDA starts. A fork server runs once per process: a second sweep
    in the same process reuses the first one's.
    """
    if scheduler is not None or settings.cluster.type != "local" or torch.cuda.device_count():
        yield
        return
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        # Dask sets its own preload list at its first call, once; ours replaces it after that.
        get_mp_context().set_forkserver_preload(list(FORKSERVER_PRELOAD))
        yield


def has_gpus(client: Client, settings: SweepSettings) -> bool:
    """Whether the cluster's workers declare GPUs (then every training task asks for one); a
    batch-system cluster says so in ``sweep.yml``, as its workers may not have started yet."""
    if settings.cluster.type != "local":
        return settings.cluster.gpus_per_worker > 0
    workers = client.scheduler_info().get("workers", {}).values()
    return any(worker.get("resources", {}).get("GPU") for worker in workers)


@contextlib.contextmanager
def tracking_server(tracking_uri: str, project: Path, for_remote_workers: bool) -> Iterator[str]:
    """The URI workers log to: ``tracking_uri`` itself when it is a server, otherwise one
    ``mlflow server`` on its store for the sweep's duration (many processes writing one SQLite
    file directly is what ends in "database is locked")."""
    if tracking_uri.startswith(("http://", "https://")):
        yield tracking_uri
        return
    store = _absolute_sqlite(tracking_uri, project)
    with store_setup_lock(store):  # whole before the server opens it (a fresh one it would make)
        pass
    server, url = start_mlflow_server(
        store,
        project / "mlruns",
        host="0.0.0.0" if for_remote_workers else "127.0.0.1",
        log_path=project / "logs" / "mlflow-server.log",
    )
    try:
        yield url
    finally:
        stop_process(server)


def _absolute_sqlite(uri: str, project: Path) -> str:
    """A SQLite URI relative to the project made absolute (the server may run elsewhere)."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
        return prefix + str((project / uri[len(prefix) :]).resolve())
    return uri
