"""What a sweep asks of a batch system through ``dask-jobqueue``: its jobs' settings
(``cluster`` in ``sweep.yml``), their scripts' arguments, each worker's lifetime under the
walltime, and the system's own words when a job is refused or never starts (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Literal

import dask
from dask.utils import parse_timedelta
from distributed.core import Status
from pydantic import Field

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.sweep.slurm import jobs_word

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
    Each worker stops taking tasks after its ``lifetime`` (± ``lifetime_stagger``, so they do
    not all leave together), finishes the one it runs and leaves, before the walltime kills it
    mid-task (``sweep.work.TrainingWorker``, docs/scale.md).
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
    """The dask-jobqueue class's arguments for ``spec``, checked (its job counts and
    lifetimes): its ``options``, with each worker importing the project before it joins
    (:data:`WORKER_PRELOAD`) and declaring ``gpus_per_worker`` GPUs as its Dask resource (every
    training task asks for one, ``sweep.driver``) and, on SLURM, the job asking the scheduler
    for the GPUs its workers declare (``--gres=gpu:N``, N = GPUs per worker × worker processes
    per job), unless a directive of the options asks already; one that asks for fewer stops
    the sweep here, before a job waits in the queue for GPUs it will not get.
    """
    if spec.minimum > spec.maximum_jobs:
        raise Seq2FinalError(
            f"sweep.yml cluster.minimum_jobs {spec.minimum_jobs} is above maximum_jobs "
            f"{spec.maximum_jobs}: valid is 0..{spec.maximum_jobs}"
        )
    options = dict(spec.options)
    extra = list(options.get("worker_extra_args", []))
    if WORKER_PRELOAD not in extra:
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
"""A batch system's walltime: ``[D-]H[:M[:S]]`` (which parts a system reads: :data:`WALLTIMES`)."""

WALLTIMES = {"slurm": "M, M:S, H:M:S or D-H[:M[:S]]", "lsf": "[H:]M", "pbs": "[[H:]M:]S",
             "sge": "[[H:]M:]S"}  # fmt: skip
"""How each batch system writes a walltime (HTCondor's jobs have none)."""


def walltime_seconds(text: str, kind: str) -> float | None:
    """``text`` as seconds the way ``kind``'s scheduler reads it (:data:`WALLTIMES`), or None
    when it is not one."""
    found = _WALLTIME.match(str(text).strip())
    if not found:
        return None
    days, *parts = found.groups()
    numbers = [int(p) for p in parts if p is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S: SLURM's alone
        hours, minutes, seconds = (numbers + [0, 0])[:3]
        return (
            int(days) * 86400 + hours * 3600 + minutes * 60 + seconds if kind == "slurm" else None
        )
    if kind == "lsf" or (kind == "slurm" and len(numbers) == 1):  # [H:]M, or SLURM's bare M
        if len(numbers) > 2:
            return None
        numbers.append(0)
    hours, minutes, seconds = [0] * (3 - len(numbers)) + numbers
    return hours * 3600 + minutes * 60 + seconds


def worker_lifetime(spec: ClusterSpec) -> tuple[float, float] | None:
    """Each worker's lifetime (counted from when it joins) and its stagger in seconds:
    ``cluster.lifetime`` and ``lifetime_stagger`` as given, else 90 % and 5 % of the walltime
    (the options' or dask-jobqueue's default for the batch system), so the last worker stops
    taking tasks at 95 % of it; None where there is no walltime to stay under (HTCondor) and no
    lifetime. A lifetime that reaches the walltime is refused (the batch system would kill that
    worker mid-task), and so is one of 0 or one its stagger could bring to 0."""
    jobqueue()  # its import sets its defaults in Dask's config
    default = dask.config.get(f"jobqueue.{spec.type}.walltime", None)
    walltime_text = spec.options.get("walltime", default)
    walltime = None
    if walltime_text is not None:
        walltime = walltime_seconds(walltime_text, spec.type)
        if walltime is None or walltime <= 0:
            raise Seq2FinalError(
                f"sweep.yml cluster.options.walltime {walltime_text!r} is not a {spec.type} "
                f"walltime: valid is {WALLTIMES[spec.type]}"
            )
    if spec.lifetime is None and walltime is None:
        return None
    lifetime = _seconds("lifetime", spec.lifetime) if spec.lifetime else (walltime or 0) * 0.9
    stagger = (
        _seconds("lifetime_stagger", spec.lifetime_stagger)
        if spec.lifetime_stagger
        else (walltime or 0) * 0.05
    )
    if lifetime <= stagger:
        raise Seq2FinalError(
            f"sweep.yml cluster.lifetime {lifetime:g} s is not above its lifetime_stagger "
            f"{stagger:g} s: a worker would leave as it joins; valid is a lifetime above it"
        )
    if walltime is not None and lifetime + stagger >= walltime:
        raise Seq2FinalError(
            f"sweep.yml cluster.lifetime {lifetime:g} s + lifetime_stagger {stagger:g} s reaches "
            f"the walltime {walltime_text} ({walltime:g} s): a worker would be killed mid-task; "
            "valid is a lifetime + stagger below the walltime"
        )
    return lifetime, stagger


def _seconds(name: str, text: str) -> float:
    """A ``cluster`` setting's Dask time (``"11h"``, ``"30m"``, ``"90s"``) in seconds."""
    try:
        return float(parse_timedelta(text) or 0)
    except (ValueError, KeyError, TypeError):
        raise Seq2FinalError(
            f"sweep.yml cluster.{name} {text!r} is not a time: valid are Dask's ('11h', '30m', "
            "'90s')"
        ) from None


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


def close_batch_cluster(cluster: Any) -> None:
    """Close ``cluster``, cancelling its jobs. Dask's SpecCluster asserts, at the end of its
    close, that every job it created has closed; a job whose submission the batch system
    refused never started and still reads "created", so the assertion would skip the rest of
    the close (its event loop's thread among it). Such jobs are marked failed first, which is
    what they are."""
    refused = [job for job in getattr(cluster, "_created", ()) if job.status == Status.created]
    for job in refused:  # (the set is weak: a job still referenced here must be one of these)
        job.status = Status.failed
    cluster.close()


def idle_word(cluster: Any, spec: ClusterSpec, refused: str | None) -> str:
    """Why a sweep has no worker, in its cluster's words: for SLURM, ``squeue``'s state and
    pending reason of each of the sweep's jobs; the last refused submission, if any."""
    if cluster is None:
        word = "no worker is connected to the scheduler"
    elif spec.type == "local":
        word = "its local workers did not start"
    else:
        jobs = list(cluster.workers.values())  # a copy: the cluster's thread changes it
        ids = [str(job.job_id) for job in jobs if getattr(job, "job_id", None)]
        if spec.type == "slurm":
            word = jobs_word(ids)
        else:
            word = f"batch jobs {', '.join(ids)} started no worker" if ids else "no job queued"
    return f"{word}; last refused submission: {refused}" if refused else word
