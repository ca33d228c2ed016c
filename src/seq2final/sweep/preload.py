"""The project as a sweep's workers start with it: imported once by the server local workers are
forked from (``sweep/cluster.py``'s ``forked_local_workers``; docs/architecture.md, "Start-up"),
and by each batch job's worker before it joins (``dask worker --preload``, ``WORKER_PRELOAD``).

Importing this module imports what a task of any pipeline imports on a worker: the project's
hooks, configuration loader and tracking (what ``settings.py`` imports), the task runner, every
pipeline's modules, kedro-mlflow's hooks and POT. Then the heap is frozen: every worker is
forked with these objects, and no worker's garbage collection walks them again.
"""

from __future__ import annotations

import gc
import importlib
import logging
import pkgutil

from seq2final.core.known_warnings import silence_known_warnings

PROJECT_MODULES = (
    "seq2final.config.loader",
    "seq2final.hooks",
    "seq2final.pipelines",
    "seq2final.sweep.work",
    "seq2final.tracking.kedro_hook",
)
"""What ``settings.py`` imports (the hooks, configuration loader and tracking), the task runner
and the pipelines' package."""

# Loaded by a task's Kedro session (kedro-mlflow's hooks) or its nodes (POT, for W2).
LIBRARIES = ("kedro_mlflow.framework.hooks", "ot")


def import_what_tasks_use() -> None:
    """The project's modules, each ``seq2final.pipelines`` module as Kedro's ``find_pipelines``
    would import them, and the libraries a task loads later (their known warnings silenced, as
    settings.py does). Importing the project applies its logging configuration; Dask's own
    logger is given back its handlers and level, so a batch job's log still says what its worker
    does (joins, leaves, and why)."""
    dask_logger = logging.getLogger("distributed")
    saved = list(dask_logger.handlers), dask_logger.level, dask_logger.propagate
    silence_known_warnings()
    for name in PROJECT_MODULES:
        importlib.import_module(name)
    pipelines = importlib.import_module("seq2final.pipelines")
    for module in pkgutil.walk_packages(pipelines.__path__, "seq2final.pipelines."):
        importlib.import_module(module.name)
    for name in LIBRARIES:
        importlib.import_module(name)
    dask_logger.handlers, dask_logger.level, dask_logger.propagate = saved


import_what_tasks_use()
gc.freeze()
