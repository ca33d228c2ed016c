"""An adapted model as MLflow 3's ``LoggedModel`` of its job run, registered from it.

MLflow 3 lists models by their ``LoggedModel`` entity: the experiment's *Models* tab, a run's
"Logged models" and a registered version's source all read it, and a model saved as run
artifacts is in none of them (docs/tracking.md, "Models").
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import LoggedModelOutput, LoggedModelStatus, Metric
from mlflow.models import Model
from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS as MODEL_VERSIONS

from seq2final.tracking.mlflow_io import ensure_registered_model, quiet_model_logging

log = logging.getLogger(__name__)

# What MLflow refuses in a logged model's name (a run name may hold a plugin's or budget's '.').
_REFUSED = re.compile(r"[/:.%\"']")
# The run's metrics its logged model carries too, so the *Models* tab compares them.
_MODEL_METRICS = ("test_accuracy", "worst_class_accuracy", "ece", "valid_accuracy", "train_gflop")


def log_and_register(
    client: MlflowClient,
    run_id: str,
    name: str,
    save: Callable[[Path, Model], None],
    tags: Mapping[str, str],
    registered_name: str,
    version_tags: Mapping[str, str],
    description: str,
) -> tuple[str, str]:
    """The model ``save`` writes (a pyfunc folder at the path, from the ``MLmodel`` metadata
    given) logged as run ``run_id``'s ``LoggedModel`` named ``name`` (the job's method, as the
    tables call it), with the run's summary metrics, and registered as a version of
    ``registered_name``, which the model's tag ``mlflow.modelVersions`` names as MLflow's own
    ``register_model`` does (the run page's *Registered models* column reads it): (model id,
    version).

    Made through ``client``, step by step, rather than the fluent ``log_model``, which logs to
    the process's active run; the registry reads a ``models:/`` source through the process's
    tracking URI, which the Kedro hook points at the same store. The model is READY only once it
    is linked, measured and registered; a failure on the way leaves it FAILED and propagates.
    """
    run = client.get_run(run_id)
    logged = client.create_logged_model(
        run.info.experiment_id, name=_REFUSED.sub("-", name), source_run_id=run_id,
        tags=dict(tags), model_type="classifier",
    )  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "model"
            save(path, Model(run_id=run_id, model_id=logged.model_id,
                             artifact_path=logged.artifact_location))  # fmt: skip
            client.log_model_artifacts(logged.model_id, str(path))
        client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
        metrics = client.get_run(run_id).data.metrics
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[
            Metric(name, metrics[name], now, 0, model_id=logged.model_id)
            for name in _MODEL_METRICS if name in metrics
        ])  # fmt: skip
        ensure_registered_model(client, registered_name)
        with quiet_model_logging():
            version = client.create_model_version(
                registered_name, logged.model_uri, run_id, tags=dict(version_tags),
                description=description, model_id=logged.model_id,
            )  # fmt: skip
        registered = [{"name": registered_name, "version": str(version.version)}]
        client.set_logged_model_tags(logged.model_id, {MODEL_VERSIONS: json.dumps(registered)})
    except BaseException:
        try:
            client.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
        except Exception as tracking_error:  # noqa: BLE001 - the first error matters more
            log.warning("could not mark logged model %s failed: %s", logged.model_id,
                        tracking_error)  # fmt: skip
        raise
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    return logged.model_id, str(version.version)
