"""What job runs and the summary run share when they talk to MLflow."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import torch
from filelock import FileLock, Timeout
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from seq2final import __version__
from seq2final.tracking.names import environment

log = logging.getLogger(__name__)

UI_ADDRESS = "http://127.0.0.1:5000"
"""Where ``make mlflow`` serves the UI of the project's own store."""


_SQLITE_PREFIX = "sqlite:///"


@contextmanager
def store_setup_lock(uri: str) -> Iterator[None]:
    """Held while a process opens a SQLite tracking store: MLflow creates and migrates the
    schema of a new file on first use, and two runs started together on a fresh ``mlflow.db``
    both migrate it, the loser failing on its ``alembic_version`` row. A lock file beside the
    database (a relative path is opened from the working directory, as SQLAlchemy opens it) makes
    the second wait for the first; servers and other stores need none, and a database in a
    folder that does not exist is left to MLflow's own error."""
    path = Path(uri.removeprefix(_SQLITE_PREFIX).split("?", 1)[0])
    if not uri.startswith(_SQLITE_PREFIX) or not path.absolute().parent.is_dir():
        yield
        return
    lock = FileLock(f"{path.absolute()}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("waiting for another run to finish setting up the tracking store %s", path)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def experiment_id(client: MlflowClient, name: str) -> str:
    """The experiment called ``name``, created (or restored from deletion) when needed."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:  # the kind MLflow 3's own experiment-type selector records for training runs
            return client.create_experiment(
                name, tags={"mlflow.experimentKind": "custom_model_development"}
            )
        except MlflowException as error:  # another worker created it first: use that one
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)
            assert experiment is not None
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    return experiment.experiment_id


def ui_url(tracking_uri: str, experiment: str | None = None, local: str = UI_ADDRESS) -> str:
    """The MLflow UI page of ``experiment`` (an id; all experiments when None), opening on *Model
    training*.

    MLflow 3.17's UI starts on its GenAI pages unless the browser remembers otherwise; the URL's
    ``workflowType`` parameter decides it for this page. ``local`` is where ``make mlflow`` serves
    a file or SQLite store; an ``http(s)`` tracking URI is its own UI.
    """
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else local
    page = f"experiments/{experiment}/runs" if experiment else "experiments"
    return f"{base}/#/{page}?workflowType=machine_learning"


def ensure_registered_model(client: MlflowClient, name: str) -> None:
    """The registered model ``name``, created unless it exists."""
    try:
        client.create_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


@contextmanager
def quiet_model_logging() -> Iterator[None]:
    """Silence what MLflow prints per model: the CloudPickle advice (the class is our own,
    importable code) and artifact download bars; its warnings and errors otherwise still show."""
    pyfunc_log = logging.getLogger("mlflow.pyfunc")
    level = pyfunc_log.level
    pyfunc_log.setLevel(logging.ERROR)
    try:
        with environment(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
            yield
    finally:
        pyfunc_log.setLevel(level)


def param_value(value: Any) -> str:
    """A parameter as MLflow stores it: text, JSON for anything else, cut to MLflow's limit."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:6000]


def requirements() -> list[str]:
    """Pinned from this environment: MLflow must not infer them (no network here)."""
    return [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"numpy=={np.__version__}",
    ]


@functools.cache
def code_version() -> str:
    """The package version plus the git commit when run from a checkout (``-dirty`` if edited)."""
    root = Path(__file__).resolve().parents[3]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}" if commit else __version__
