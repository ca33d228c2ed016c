"""What a sweep's Dask workers run: one project pipeline for one unit of work, logged to a file.

Each task is an ordinary Kedro run of the project (``build_sequences``, ``pretrain_historical``,
``adapt_final`` or ``evaluate``) whose run parameters select exactly one sequence, state or job,
so a sweep computes what the same ``kedro run`` typed by hand would, with the same stores, leases
and tracking. Its log goes to its own file, whose path the sweep reports when the task fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import random
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from distributed import WorkerPlugin, get_worker
from distributed.core import Status
from kedro.framework.session import KedroSession

from seq2final.core.startup import bootstrap_once


@dataclass(frozen=True)
class PipelineRun:
    """One unit of a sweep: which pipeline, with which run parameters, logged where."""

    kind: str  # sequence, state, job or evaluate
    name: str
    pipeline: str
    params: dict[str, Any]
    log_path: str


def run_task(project: str, env: str | None, task: PipelineRun, *after: Any) -> dict[str, Any]:
    """Run ``task`` in this worker (``after``: the results of the tasks it waited for)."""
    started = time.perf_counter()
    _announce_start()
    os.chdir(project)  # relative paths in the catalog and logs are the project's (one task a time)
    bootstrap_once(Path(project))
    try:
        with (
            task_log(Path(task.log_path)),
            KedroSession.create(
                project_path=Path(project), env=env, runtime_params=task.params
            ) as session,
        ):
            session.run(pipeline_names=[task.pipeline])  # type: ignore[call-arg]  # Kedro types create() as returning its AbstractSession
    except Exception as error:
        raise TaskFailed(root_cause(error)) from None  # the full traceback is in the task's log
    return {"name": task.name, "seconds": time.perf_counter() - started}


STARTED_TOPIC = "seq2final-task-started"
"""The Dask event topic on which a task says it has started (the driver counts what runs: the
scheduler's "processing" also holds the tasks queued behind it on a worker)."""


def _announce_start() -> None:
    try:
        worker = get_worker()
    except ValueError:  # called outside a Dask worker
        return
    worker.log_event(STARTED_TOPIC, worker.get_current_task())


class TaskFailed(Exception):
    """A task's failure as one line: its root cause (Kedro wraps node errors in its own)."""


def root_cause(error: BaseException) -> str:
    """The innermost error behind ``error``, as ``Type: message`` on one line."""
    while True:
        inner = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        if inner is None:
            break
        error = inner
    message = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


_OWN_HANDLERS = ("mlflow", "alembic")


@contextmanager
def task_log(path: Path) -> Iterator[None]:
    """Send everything logged during the block to ``path`` instead of the worker's terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Libraries that print through handlers of their own (MLflow) are sent to the file too.
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in _OWN_HANDLERS)]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    with path.open("a", encoding="utf8") as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(
            logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s")
        )
        for logger in loggers[1:]:
            logger.handlers, logger.propagate = [], True
        loggers[0].handlers = [handler]
        loggers[0].setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
                yield
        except BaseException:
            logging.getLogger(__name__).exception("task failed")
            raise
        finally:
            for logger, handlers, level, propagate in saved:
                logger.handlers, logger.propagate = handlers, propagate
                logger.setLevel(level)


class TrainingWorker(WorkerPlugin):
    """Sets a Dask worker up for training: ``threads`` torch threads (one by default: processes
    scale better than threads for these small models), glibc's default memory reuse, no pausing
    at a memory threshold, and, given a ``lifetime`` (seconds ± ``stagger``, drawn per worker),
    a departure that waits for the running task.

    Dask pauses a worker whose process passes 80 % of its memory limit until Dask-held data is
    spilled or freed; a training task's memory is torch's, which waiting never frees, so a paused
    worker of a sweep waits for good (in a trial by hand, a SLURM sweep of ``memory: 1GB`` jobs
    stood still after their first tasks, docs/scale.md). Without the pause, a worker past the
    limit is ended by its nanny at 95 % and its task fails in one line after Dask's retries.

    Dask's own ``--lifetime`` retires a worker at once: the task it runs is cut and started again
    elsewhere, and one longer than the lifetime never finishes. At its lifetime this worker
    pauses instead (no task is sent to it or started on it), finishes the task it runs, then
    leaves (docs/scale.md, "When a job dies").

    Dask starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which pins glibc's thresholds: every
    allocation over 128 KiB is then mapped and unmapped afresh, and each training step's tensors
    fault their pages in again. Measured on a 2-core machine, a sweep's workers spent most of their
    time in the kernel that way, and ran 1.8× slower than the same jobs in one process. Fixed
    thresholds (32 MiB mapping, 256 MiB trim) give the heap back its reuse, on any worker.
    """

    name = "seq2final-training-worker"

    def __init__(self, threads: int, lifetime: float | None = None, stagger: float = 0.0) -> None:
        self.threads = threads
        self.lifetime = lifetime
        self.stagger = stagger

    def setup(self, worker: Any) -> None:
        torch.set_num_threads(self.threads)
        reuse_freed_memory()
        worker.memory_manager.memory_pause_fraction = False
        if worker.status == Status.paused:  # paused before this plugin came: nothing unpauses it
            worker.status = Status.running
        if self.lifetime:
            seconds = self.lifetime + random.uniform(-self.stagger, self.stagger)
            worker.loop.call_later(seconds, self._leave_when_idle, worker)

    def _leave_when_idle(self, worker: Any) -> None:
        """Pause (the scheduler sends a paused worker nothing, and it starts nothing), then
        leave once the task it runs has finished: its queued tasks go to other workers."""
        if worker.status == Status.running:
            worker.status = Status.paused
        if worker.status != Status.paused:  # closing already
            return
        if worker.state.executing_count:
            worker.loop.call_later(0.5, self._leave_when_idle, worker)
            return
        worker.loop.add_callback(worker.close_gracefully, reason=LIFETIME_REACHED)


LIFETIME_REACHED = "seq2final-lifetime-reached"
"""The reason a worker that reached its sweep lifetime gives when it leaves (in its job's log)."""


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)


def reuse_freed_memory() -> bool:
    """Keep freed memory for reuse instead of unmapping it (glibc only; False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 * 2**20) and mallopt(_M_TRIM_THRESHOLD, 256 * 2**20))
