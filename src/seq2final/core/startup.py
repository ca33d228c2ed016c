"""Kedro's project start-up, done once per process."""

from __future__ import annotations

import atexit
import gc
import tomllib
from pathlib import Path

from kedro.framework import project as kedro_project
from kedro.framework.startup import bootstrap_project


def bootstrap_once(project: Path) -> None:
    """Kedro's ``bootstrap_project`` for ``project``, unless this process has configured the
    project's package already.

    Configuring reads the package's ``settings`` again through dynaconf, which walks the whole
    call stack (``inspect.stack``) for each environment-named settings module it does not find:
    about a second a call once many modules are loaded, paid by every task a sweep worker runs
    and by every command that starts a session of its own (docs/architecture.md, "Start-up").
    The settings belong to the package, not to the folder: a process serves one project
    package, from the first project's source. What a finished session leaves behind, the
    pipelines it asked for, is cleared as configuring would."""
    try:
        metadata = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf8"))
        package = metadata["tool"]["kedro"]["package_name"]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        package = None  # not a project Kedro knows: bootstrap_project says why in its words
    if package is None or package != kedro_project.PACKAGE_NAME:
        bootstrap_project(project)
    else:
        kedro_project.pipelines.set_requested(None)


def exit_without_collecting() -> None:
    """Spare this process the garbage collections of interpreter shutdown.

    A process that has imported torch, MLflow, pandas and matplotlib holds about 600,000 objects,
    and Python's shutdown runs full collections over them as it clears each module: about 3 s
    of every ``kedro`` command's and every spawned sweep worker's life, after its work is done
    (docs/architecture.md, "Start-up"; forked workers end with ``os._exit`` and skip it all).
    Freezing the heap at exit takes those objects out of the collector's reach; they are still
    freed as their references go, and the exit handlers (logging's flush among them) still run.
    What Python never promised at shutdown, finalizers of objects caught in reference cycles,
    is given up; every file and store this project writes is closed by its own ``with`` block
    before then.
    """
    atexit.register(gc.freeze)
