"""The project as a sweep's local workers start with it: imported once, by the server they are
forked from (``sweep/cluster.py``'s ``forked_local_workers``; docs/architecture.md, "Start-up").

Importing this module imports what a task of any pipeline imports on a worker: the project's
hooks, configuration loader and tracking (what ``settings.py`` imports), the task runner, every
pipeline's modules, kedro-mlflow's hooks and POT. Then the heap is frozen: every worker is
forked with these objects, and no worker's garbage collection walks them again.
"""

from __future__ import annotations

import gc
import importlib
import pkgutil

import seq2final.config.loader  # noqa: F401
import seq2final.hooks  # noqa: F401
import seq2final.pipelines
import seq2final.sweep.work  # noqa: F401
import seq2final.tracking.kedro_hook  # noqa: F401
from seq2final.core.known_warnings import silence_known_warnings

# Loaded by a task's Kedro session (kedro-mlflow's hooks) or its nodes (POT, for W2).
LIBRARIES = ("kedro_mlflow.framework.hooks", "ot")


def import_what_tasks_use() -> None:
    """Each ``seq2final.pipelines`` module, as Kedro's ``find_pipelines`` would import them,
    and the libraries a task loads later (their known warnings silenced, as settings.py does)."""
    silence_known_warnings()
    for module in pkgutil.walk_packages(seq2final.pipelines.__path__, "seq2final.pipelines."):
        importlib.import_module(module.name)
    for name in LIBRARIES:
        importlib.import_module(name)


import_what_tasks_use()
gc.freeze()
