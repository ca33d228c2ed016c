"""Process pools that are safe to start after torch has trained.

GNU OpenMP, which torch and scikit-learn share, is not fork-safe: a pool forked from a process
whose OpenMP runtime already ran threads (any training, even one forward pass with two threads)
can leave its workers blocked for good on a lock the parent held, and whether it does depends on
the CPU and on timing (docs/architecture.md, "Processes"). Every pool of the project starts its
workers from ``forkserver`` (a clean server process forks them) or, where the platform lacks it,
``spawn``; neither copies the parent's threads.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext

SAFE_START_METHODS = ("forkserver", "spawn")
"""Start methods whose workers never inherit the parent's OpenMP state, in order of preference."""


def safe_context() -> BaseContext:
    """The first of :data:`SAFE_START_METHODS` this platform offers."""
    available = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context(next(m for m in SAFE_START_METHODS if m in available))


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes started by :func:`safe_context`; its tasks and their
    arguments must be picklable, module-level functions (as for any non-fork pool)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=safe_context())
