"""Process pools that are safe to start after torch has trained.

GNU OpenMP, which torch and scikit-learn share, is not fork-safe: a pool forked from a process
whose OpenMP runtime already ran threads (any training, even one forward pass with two threads)
can leave its workers blocked for good on a lock the parent held, and whether it does depends on
the CPU and on timing (docs/architecture.md, "Processes"). Every pool of the project starts its
workers from ``forkserver`` (a clean server process forks them) or, where the platform lacks it,
``spawn``; neither copies the parent's threads, nor its logging set-up, so what the workers log
is sent back and logged here (:func:`map_in_processes`).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

SAFE_START_METHODS = ("forkserver", "spawn")
"""Start methods whose workers never inherit the parent's OpenMP state, in order of preference."""

Item = TypeVar("Item")
Result = TypeVar("Result")


def safe_context() -> BaseContext:
    """The first of :data:`SAFE_START_METHODS` this platform offers."""
    available = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context(next(m for m in SAFE_START_METHODS if m in available))


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes started by :func:`safe_context`; its tasks and their
    arguments must be picklable, module-level functions (as for any non-fork pool)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=safe_context())


def map_in_processes(
    function: Callable[[Item], Result], items: Iterable[Item], workers: int
) -> list[Result]:
    """``function`` of every item in :func:`process_pool`, in order, with the INFO and higher
    records the workers logged re-logged in this process (to the run's handlers and
    ``logs/info.log``), after their task."""
    with process_pool(workers) as pool:
        outcomes = list(pool.map(_logged, [(function, item) for item in items]))
    results = []
    for result, records in outcomes:
        for record in records:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
        results.append(result)
    return results


class _Collected(logging.Handler):
    """Keeps the records logged in a worker, made picklable (message formatted, no objects)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        self.records.append(record)


def _logged(call: tuple[Callable[[Any], Any], Any]) -> tuple[Any, list[logging.LogRecord]]:
    """In a worker: the call's result and the records it logged."""
    function, item = call
    root, handler = logging.getLogger(), _Collected()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        return function(item), handler.records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
