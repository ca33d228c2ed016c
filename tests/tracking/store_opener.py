"""What each racing process of ``test_tracking.py`` runs, in a module of its own: a spawned
process imports the module of its target, and this one imports only the store's setup, not the
whole test module."""

import os
from pathlib import Path

from mlflow import MlflowClient

from seq2final.tracking.mlflow_io import store_setup_lock


def open_store(project: Path, barrier) -> None:
    os.chdir(project)
    barrier.wait(timeout=60)  # every process opens the fresh store at once
    with store_setup_lock("sqlite:///mlflow.db"):
        MlflowClient("sqlite:///mlflow.db").search_experiments(max_results=1)
