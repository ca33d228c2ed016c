"""Where a sweep runs: a Dask cluster (local processes, an existing scheduler, or a batch system
through ``dask-jobqueue``) and, for SQLite tracking, one MLflow server its workers log to.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import dask
import torch
from dask.utils import parse_timedelta
from distributed import Client, LocalCluster, Nanny, Scheduler, SpecCluster
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.utils import get_mp_context
from pydantic import Field

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.sweep.services import start_mlflow_server, stop_process
from seq2final.sweep.slurm import jobs_word
from seq2final.sweep.work import TrainingWorker
from seq2final.tracking.mlflow_io import store_setup_lock

log = logging.getLogger(__name__)

JOBQUEUE_CLUSTERS = {
    "slurm": "SLURMCluster",
    "pbs": "PBSCluster",
    "sge": "SGECluster",
    "lsf": "LSFCluster",
    "htcondor": "HTCondorCluster",
}


class ClusterSpec(StrictModel):
    """``cluster`` block of ``conf/<env>/sweep.yml``: a batch-system cluster the sweep starts.

    Its jobs are kept between ``minimum_jobs`` and ``maximum_jobs`` for the whole sweep (Dask's
    adaptive scaling): a job that ends, cancelled, preempted or at its walltime, is replaced.
    Each worker leaves after its ``lifetime`` (± ``lifetime_stagger``, so they do not all leave
    together), before the walltime kills it: the scheduler then moves its task to another
    worker instead of losing it mid-write (dask-jobqueue's recipe, docs/scale.md).
    """

    type: Literal["local", "slurm", "pbs", "sge", "lsf", "htcondor"] = "local"
    maximum_jobs: int = Field(default=1, ge=1)  # batch jobs (each runs `processes` workers)
    minimum_jobs: int | None = Field(default=None, ge=0)  # kept even when idle; None: maximum
    lifetime: str | None = None  # a Dask time ("11h"); None: 90 % of the walltime
    lifetime_stagger: str | None = None  # None: 5 % of the walltime
    options: dict[str, Any] = Field(default_factory=dict)  # the dask-jobqueue class's arguments
    gpus_per_worker: int = Field(default=0, ge=0)  # declared as the workers' GPU resource

    @property
    def minimum(self) -> int:
        """The jobs kept even when no task waits (``minimum_jobs``, else all of them)."""
        return self.maximum_jobs if self.minimum_jobs is None else self.minimum_jobs


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


WORKER_PRELOAD = "seq2final.sweep.preload"
"""What a batch job's worker imports before it joins the scheduler (``dask worker --preload``):
what every task imports (``sweep/preload.py``), so a worker counted as joined is ready, its first
task starts at once, and its lifetime counts from then."""

LOST_JOB_GRACE = "2s"
"""How long a batch cluster waits, after its worker is gone, before it drops that job and
adaptive scaling submits another (Dask's ``distributed.deploy.lost-worker-timeout``, 15 s by
default, a wait for a worker that comes back; ours never do: a worker whose scheduler connection
breaks closes with its nanny, and a job that ends is gone)."""

_GPU_DIRECTIVE = re.compile(
    r"--(?:gres=gpu(?::[\w-]+)?:(\d+)|gpus(?:-per-node)?=(?:[\w-]+:)?(\d+))"
)
"""A SLURM directive that asks for GPUs: ``--gres=gpu[:type]:N``, ``--gpus[-per-node]=[type:]N``."""


def jobqueue_options(spec: ClusterSpec) -> dict[str, Any]:
    """The dask-jobqueue class's arguments for ``spec``: its ``options``, with each worker
    importing the project before it joins (:data:`WORKER_PRELOAD`) and ``gpus_per_worker`` GPUs declared as its Dask
    resource (every training task asks for one, ``sweep.driver``) and, on SLURM, the job asking
    the scheduler for the GPUs its workers declare (``--gres=gpu:N``, N = GPUs per worker ×
    worker processes per job), unless a directive of the options asks already; one that asks
    for fewer stops the sweep here, before a job waits in the queue for GPUs it will not get.
    """
    if spec.minimum > spec.maximum_jobs:
        raise Seq2FinalError(
            f"sweep.yml cluster.minimum_jobs {spec.minimum_jobs} is above maximum_jobs "
            f"{spec.maximum_jobs}: valid is 0..{spec.maximum_jobs}"
        )
    options = dict(spec.options)
    extra = list(options.get("worker_extra_args", []))
    if "--preload" not in extra:
        extra += ["--preload", WORKER_PRELOAD]
    worker_lifetime(spec)  # checked here, kept by each worker's TrainingWorker plugin
    if spec.gpus_per_worker:
        extra += ["--resources", f"GPU={spec.gpus_per_worker}"]
    if extra:
        options["worker_extra_args"] = extra
    if spec.type != "slurm" or not spec.gpus_per_worker:
        return options
    processes = options.setdefault("processes", 1)  # dask-jobqueue would derive it from cores
    needed = spec.gpus_per_worker * processes
    directives = list(options.get("job_extra_directives", []))
    asked = [int(a or b) for d in directives for a, b in _GPU_DIRECTIVE.findall(d)]
    if not asked:
        options["job_extra_directives"] = [*directives, f"--gres=gpu:{needed}"]
    elif max(asked) < needed:
        raise Seq2FinalError(
            f"sweep.yml cluster.options.job_extra_directives asks SLURM for {max(asked)} GPU(s) "
            f"per job, but gpus_per_worker {spec.gpus_per_worker} × processes {processes} "
            f"needs {needed}: drop the directive (seq2final adds --gres=gpu:{needed}) or raise it"
        )
    return options


def jobqueue() -> ModuleType:
    """``dask_jobqueue``, imported once, lazily (only batch-system sweeps need it), with the
    interrupt handler it replaces on import put back: its import sets SIGINT to exit at once
    (so Ctrl-C would skip the sweep's clean-up, the jobs' cancelling among it) and fails
    outside the main thread, so a sweep calls this first in its main thread (``sweep.command``).
    """
    if "dask_jobqueue" not in sys.modules:
        handler = signal.getsignal(signal.SIGINT)
        import dask_jobqueue  # noqa: F401  # lazy: only batch-system sweeps need it

        signal.signal(signal.SIGINT, handler)
    return sys.modules["dask_jobqueue"]


_WALLTIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
"""A batch system's walltime: ``[D-]H[:M[:S]]`` (SLURM also reads a bare number as minutes)."""


def walltime_seconds(text: str, kind: str) -> float | None:
    """``text`` as seconds the way ``kind``'s scheduler reads it, or None when it is not one:
    SLURM reads ``M``, ``M:S``, ``H:M:S`` and ``D-H[:M[:S]]``; LSF ``[H:]M``; PBS and SGE
    ``[[H:]M:]S``."""
    found = _WALLTIME.match(str(text).strip())
    if not found:
        return None
    days, *parts = found.groups()
    numbers = [int(p) for p in parts if p is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S
        numbers += [0] * (3 - len(numbers))
        return int(days) * 86400 + numbers[0] * 3600 + numbers[1] * 60 + numbers[2]
    if kind == "slurm" and len(numbers) < 3:  # M or M:S
        numbers = [0, *numbers, *([0] if len(numbers) == 1 else [])]
    elif kind == "lsf":  # [H:]M
        numbers = [*([0] * (2 - len(numbers))), *numbers, 0][-3:]
    numbers = [0] * (3 - len(numbers)) + numbers
    return numbers[0] * 3600 + numbers[1] * 60 + numbers[2]


def worker_lifetime(spec: ClusterSpec) -> tuple[float, float] | None:
    """Each worker's lifetime and its stagger in seconds: ``cluster.lifetime`` and
    ``lifetime_stagger`` as given, else 90 % and 5 % of the walltime (the options' or
    dask-jobqueue's default for the batch system), so the last worker leaves at 95 % of it;
    None where there is no walltime to stay under (HTCondor) and no lifetime. A lifetime that
    reaches the walltime is refused: the batch system would kill that worker mid-task."""
    jobqueue()  # its import sets its defaults in Dask's config
    default = dask.config.get(f"jobqueue.{spec.type}.walltime", None)
    walltime_text = spec.options.get("walltime", default)
    walltime = None
    if walltime_text is not None:
        walltime = walltime_seconds(walltime_text, spec.type)
        if walltime is None or walltime <= 0:
            raise Seq2FinalError(
                f"sweep.yml cluster.options.walltime {walltime_text!r} is not a {spec.type} "
                "walltime: valid is [D-]HH:MM:SS"
            )
    if spec.lifetime is None and walltime is None:
        return None
    given = {"lifetime": spec.lifetime, "lifetime_stagger": spec.lifetime_stagger}
    seconds = {name: _seconds(name, text) for name, text in given.items()}
    lifetime = seconds["lifetime"] if spec.lifetime else (walltime or 0) * 0.9
    stagger = seconds["lifetime_stagger"] if spec.lifetime_stagger else (walltime or 0) * 0.05
    if walltime is not None and lifetime + stagger >= walltime:
        raise Seq2FinalError(
            f"sweep.yml cluster.lifetime {lifetime:g} s + lifetime_stagger {stagger:g} s reaches "
            f"the walltime {walltime_text} ({walltime:g} s): a worker would be killed mid-task; "
            "valid is a lifetime + stagger below the walltime"
        )
    return lifetime, stagger


def _seconds(name: str, text: str | None) -> float:
    """A ``cluster`` setting's Dask time (``"11h"``, ``"30m"``, ``"90s"``) in seconds."""
    try:
        return float(parse_timedelta(text) or 0) if text else 0.0
    except (ValueError, KeyError, TypeError):
        raise Seq2FinalError(
            f"sweep.yml cluster.{name} {text!r} is not a time: valid are Dask's ('11h', '30m', "
            "'90s')"
        ) from None


def _start_cluster(workers: int | None, settings: SweepSettings, threads: int) -> Any:
    """A batch-system cluster adapting between ``cluster.minimum_jobs`` and ``maximum_jobs``
    jobs, or local workers: one per GPU (each
    seeing only its device) on a CUDA machine, else ``workers`` processes."""
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


class SubmitErrors(logging.Filter):
    """A batch system's refusal of a job (a queue it does not have, an account it refuses) is
    logged by Dask, traceback and all, each time adaptive scaling submits again (every second):
    this says each new refusal once, in the batch system's own words, and keeps the last for a
    stalled sweep's message. Other records pass."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__()
        self.say = say
        self.last: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not (isinstance(error, RuntimeError) and str(error).startswith(_SUBMIT_FAILED)):
            return True
        lines = [line for line in str(error).splitlines() if line.strip()]
        said = [line for line in lines if "error" in line.lower()] or lines
        if said[0] != self.last:
            self.last = said[0]
            self.say(f"A batch job was refused: {self.last}")
        return False


_SUBMIT_FAILED = "Command exited with non-zero exit code"
"""How dask-jobqueue's error for a submission command that failed begins."""

_SUBMIT_LOGGERS = ("distributed.deploy.adaptive", "tornado.application")
"""Where Dask logs a failed submission: adaptive scaling's errors, and its scaling task's."""


@contextlib.contextmanager
def submit_errors(say: Callable[[str], None]) -> Iterator[SubmitErrors]:
    """:class:`SubmitErrors` on the loggers Dask reports refused submissions to, for the block."""
    watch = SubmitErrors(say)
    for name in _SUBMIT_LOGGERS:
        logging.getLogger(name).addFilter(watch)
    try:
        yield watch
    finally:
        for name in _SUBMIT_LOGGERS:
            logging.getLogger(name).removeFilter(watch)


def idle_word(cluster: Any, spec: ClusterSpec, refused: str | None) -> str:
    """Why a sweep has no worker, in its cluster's words: for SLURM, ``squeue``'s state and
    pending reason of each of the sweep's jobs; the last refused submission, if any."""
    if cluster is None:
        word = "no worker is connected to the scheduler"
    elif spec.type == "local":
        word = "its local workers did not start"
    else:
        ids = [str(j.job_id) for j in cluster.workers.values() if getattr(j, "job_id", None)]
        if spec.type == "slurm":
            word = jobs_word(ids)
        else:
            word = f"batch jobs {', '.join(ids)} started no worker" if ids else "no job queued"
    return f"{word}; last refused submission: {refused}" if refused else word


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
