"""MLflow tracking: one run per job, its Optuna trials as nested runs, its model in the registry.

A job run is a top-level run in one experiment per sequence (``seq2final/<sequence>`` by default),
not a child of the run kedro-mlflow opens for each ``kedro run``: a job is trained by one
``kedro run`` and reused by every later one, and comparing methods across architectures means
comparing jobs made by many ``kedro run`` calls, which the UI does best when they are rows of one
experiment. Each job run carries the id of the kedro-mlflow run that made it (tag ``kedro_run_id``).

Everything a finished job logs is read back from the result store (record, curves, model file), so
a job trained while tracking was off is logged, without retraining, the next time it is reused with
tracking on. A job run is identified by the job key (tag ``job_key``): a reused job that already has
a finished run logs nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import mlflow
import mlflow.pyfunc
import numpy as np
import pandas as pd
import torch
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types import Schema, TensorSpec

from seq2final import __version__
from seq2final.errors import Seq2FinalError
from seq2final.plots import learning_curves
from seq2final.serving import ImageClassifier, predict_probabilities

if TYPE_CHECKING:
    from seq2final.datasets import ResultStore
    from seq2final.jobs import JobPlan, RunPlan

log = logging.getLogger(__name__)

# Paper Table 1's classes; oracle and baseline are the references every table compares with.
FAMILIES = {0: "reference", 1: "class 1", 2: "class 2", 3: "class 3"}
# How an Optuna trial's state shows as an MLflow run status (the exact state is a tag).
_TRIAL_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAILED": "FAILED"}
_CURVE_COLUMNS = ("train_loss", "train_accuracy", "valid_loss", "valid_accuracy")
_NAME_FIELDS = ("sequence", "dataset", "arch", "method", "budget", "seed")


def safe_name(text: str) -> str:
    """``text`` with characters other than letters, digits, ``_ . + -`` replaced by ``-``.

    Sequence spec strings (``source100:rotation60``) are valid sequence names but not valid parts
    of a registered model's name, which MLflow keeps free of ``:`` and ``/``.
    """
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", text)


def render_name(template: str, what: str, **fields: Any) -> str:
    """Fill a name template from the job's fields; an unknown field is a one-line error."""
    try:
        return template.format(**{k: safe_name(str(v)) for k, v in fields.items()})
    except (KeyError, IndexError, ValueError) as error:
        raise Seq2FinalError(
            f"parameter 'mlflow.{what}' = {template!r} is not a valid template ({error}); "
            f"fields: {', '.join('{' + f + '}' for f in _NAME_FIELDS)}"
        ) from None


@contextmanager
def fail_fast() -> Iterator[None]:
    """MLflow's HTTP client retries an unreachable server for minutes; a first check should not."""
    saved = {
        k: os.environ.get(k)
        for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")
    }
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="10")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_registry_names(client: MlflowClient, names: list[str]) -> None:
    """Ask MLflow itself whether it accepts each registered-model name, before any training."""
    for name in names:
        try:
            client.get_registered_model(name)
        except MlflowException as error:
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise Seq2FinalError(
                    f"MLflow refuses the registered model name '{name}': "
                    f"{str(error).splitlines()[0]}"
                ) from None


@dataclass
class JobTracker:
    """Logs the jobs of one plan to MLflow (see the module docstring for the layout)."""

    client: MlflowClient
    experiment_id: str
    plan: RunPlan
    options: Mapping[str, Any]
    sequence_spec: str
    example: np.ndarray
    kedro_run_id: str | None = None
    seconds: float = 0.0  # time spent logging, so its cost can be set against the run's
    _finished: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def connect(
        cls, options: Mapping[str, Any], plan: RunPlan, sequence_spec: str, example: np.ndarray
    ) -> JobTracker | None:
        """The tracker of this plan's experiment, or None when tracking is off."""
        if not options.get("enabled", True):
            return None
        client = MlflowClient()
        name = render_name(options["experiment"], "experiment", **_plan_fields(plan, "-"))
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            experiment_id = client.create_experiment(name)
        else:
            experiment_id = experiment.experiment_id
            if experiment.lifecycle_stage == "deleted":
                client.restore_experiment(experiment_id)
        active = mlflow.active_run()
        tracker = cls(
            client,
            experiment_id,
            plan,
            options,
            sequence_spec,
            example,
            active.info.run_id if active else None,
        )
        check_registry_names(client, [tracker.model_name(job) for job in plan.jobs])
        tracker._finished = tracker._runs_by_key("FINISHED")
        return tracker

    def model_name(self, job: JobPlan) -> str:
        return render_name(
            self.options["registered_model"],
            "registered_model",
            **_plan_fields(self.plan, job.method),
        )

    def _runs_by_key(self, status: str) -> dict[str, list[str]]:
        keys = {job.key for job in self.plan.jobs}
        found: dict[str, list[str]] = {}
        for run in self.client.search_runs(
            [self.experiment_id],
            filter_string=f"attributes.status = '{status}' and tags.kind = 'job'",
            max_results=50_000,
        ):
            key = run.data.tags.get("job_key")
            if key in keys:
                found.setdefault(key, []).append(run.info.run_id)
        return found

    def start(self, job: JobPlan) -> str:
        """A RUNNING run for a job about to train; runs an interrupted process left open end KILLED."""
        started = time.perf_counter()
        for run_id in self._runs_by_key("RUNNING").get(job.key, []):
            self.client.set_tag(run_id, "ended_by", "a later run of the same job")
            self.client.set_terminated(run_id, "KILLED")
        run = self.client.create_run(
            self.experiment_id, run_name=_run_name(self.plan, job), tags=self._tags(job)
        )
        self._log_params(run.info.run_id, job)
        self.seconds += time.perf_counter() - started
        return run.info.run_id

    def fail(self, run_id: str, error: BaseException) -> None:
        """A job whose training raised ends FAILED, never FINISHED with missing metrics."""
        message = f"{type(error).__name__}: {error}"
        self.client.set_tag(run_id, "error", message[:5000])
        self.client.set_terminated(run_id, "FAILED")

    def complete(self, job: JobPlan, run_id: str | None, store: ResultStore) -> None:
        """Log a finished job from the store; a reused job with a finished run logs nothing."""
        earlier = self._finished.get(job.key, [])
        if run_id is None and earlier:
            return
        if run_id is None:
            run_id = self.start(job)
            log.info("logging finished job %s to MLflow", job.key)
        started = time.perf_counter()
        try:
            self._log_result(run_id, job, store)
        except BaseException as error:
            self.fail(run_id, error)
            raise
        self.client.set_terminated(run_id, "FINISHED")
        for old in earlier:
            self.client.set_tag(old, "superseded_by", run_id)
        self._finished[job.key] = [run_id]
        self.seconds += time.perf_counter() - started
        log.info(
            "MLflow: %s logged (%.1f s of tracking in this run so far)", job.method, self.seconds
        )

    # -- what a job run holds ----------------------------------------------------------------

    def _tags(self, job: JobPlan) -> dict[str, str]:
        from seq2final.methods import METHODS

        recipe = METHODS.get(job.method)
        family = FAMILIES[recipe.paper_class] if recipe else "custom"
        tags = {
            "kind": "job",
            "job_key": job.key,
            "sequence": self.plan.sequence_name,
            "sequence_key": self.plan.sequence_key,
            "dataset": self.plan.dataset,
            "arch": self.plan.arch,
            "method": job.method,
            "family": family,
            "seed": str(self.plan.seed),
            "budget": self.plan.budget_name,
            "code_version": code_version(),
        }
        if self.kedro_run_id:
            tags["kedro_run_id"] = self.kedro_run_id
        return tags

    def _log_params(self, run_id: str, job: JobPlan) -> None:
        params = {
            "sequence": self.plan.sequence_name,
            "sequence_key": self.plan.sequence_key,
            "sequence_spec": self.sequence_spec,
            "dataset": self.plan.dataset,
            "data_path": self.plan.data_path,
            "seed": self.plan.seed,
            "arch": self.plan.arch,
            "method": job.method,
            "historical": job.historical,
            "final": job.final,
            "historical_state": job.state_key,
            "budget": self.plan.budget_name,
            **{f"budget.{k}": v for k, v in self.plan.budget.items()},
            **{f"training.{k}": v for k, v in self.plan.engine.items()},
        }
        self._batch(run_id, params=params)

    def _log_result(self, run_id: str, job: JobPlan, store: ResultStore) -> None:
        record = store[job.key]
        curves = store.learning_curves(job.key)
        now = int(time.time() * 1000)
        summary = {
            name: record[name]
            for name in (
                "test_accuracy", "worst_class_accuracy", "test_nll", "ece", "valid_accuracy",
                "epochs", "trials", "wall_seconds",
            )
        }  # fmt: skip
        summary["parameter_count"] = record["parameters"]
        metrics = [Metric(k, float(v), now, 0) for k, v in summary.items()]
        final_stage = _final_stage(record)
        stages = list(dict.fromkeys(curves["stage"]))
        for stage, rows in curves.groupby("stage", sort=False):
            prefixes = (["curve"] if stage == final_stage else []) + (
                [f"stages/{stage}"] if len(stages) > 1 else []
            )
            for prefix in prefixes:
                for row in rows.itertuples():
                    for column in _CURVE_COLUMNS:
                        value = getattr(row, column)
                        if value == value:  # epoch 0 has no training metrics (NaN)
                            metrics.append(
                                Metric(f"{prefix}/{column}", float(value), now, int(row.epoch))
                            )
        params = {
            f"hp.{stage}.{k}": v
            for stage, hp in record["hyperparameters"].items()
            for k, v in hp.items()
        }
        params.update({f"chosen.{k}": v for k, v in record["chosen"].items()})
        self._batch(run_id, metrics=metrics, params=params, tags={"device": record["device"]})
        self._log_trials(run_id, job, record)
        with tempfile.TemporaryDirectory() as folder:
            figure_path = Path(folder) / "learning_curves.png"
            _save_figure(
                curves,
                f"{record['method']} on {record['sequence']} ({record['arch']})",
                figure_path,
            )
            self.client.log_artifact(run_id, str(figure_path))
        self.client.log_artifact(run_id, str(store.record_path(job.key)))
        self.client.log_artifact(run_id, str(store.curves_path(job.key)))
        if self.options.get("log_models", True):
            self._log_model(run_id, job, record, store)

    def _log_trials(self, run_id: str, job: JobPlan, record: Mapping[str, Any]) -> None:
        for fit in record["fits"]:
            for trial in fit.get("trial_summaries", []):
                tags = {
                    **self._tags(job),
                    "kind": "trial",
                    "mlflow.parentRunId": run_id,
                    "stage": fit["stage"],
                    "trial_state": trial["state"],
                }
                child = self.client.create_run(
                    self.experiment_id,
                    run_name=f"{fit['stage']} trial {trial['number']}",
                    tags=tags,
                ).info.run_id
                now = int(time.time() * 1000)
                metrics = [
                    Metric("curve/valid_accuracy", float(v), now, epoch)
                    for epoch, v in enumerate(trial.get("valid_curve") or [])
                ]
                if trial.get("value") is not None:
                    metrics.append(Metric("valid_accuracy", float(trial["value"]), now, 0))
                params = {f"hp.{k}": v for k, v in trial["params"].items()}
                params.update(stage=fit["stage"], trial=trial["number"])
                self._batch(child, metrics=metrics, params=params)
                self.client.set_terminated(child, _TRIAL_STATUS.get(trial["state"], "KILLED"))

    def _log_model(
        self, run_id: str, job: JobPlan, record: Mapping[str, Any], store: ResultStore
    ) -> None:
        classifier = ImageClassifier(
            tuple(self.example.shape[1:]), record["engine"]["input_scale"], record["eval_step"]
        )
        probabilities = predict_probabilities(
            store.model(job.key), self.example, classifier.input_scale, classifier.step
        )
        classes = probabilities.shape[1]
        signature = ModelSignature(
            inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, -1, -1, -1))]),
            outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, classes))]),
        )
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "model"
            mlflow.pyfunc.save_model(
                path,
                python_model=classifier,
                artifacts={"model": str(store.model_path(job.key))},
                signature=signature,
                input_example=self.example.transpose(0, 2, 3, 1),
                pip_requirements=_requirements(),
            )
            self.client.log_artifacts(run_id, str(path), "model")
        name = self.model_name(job)
        try:
            self.client.create_registered_model(name)
        except MlflowException as error:
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        version = self.client.create_model_version(
            name, f"runs:/{run_id}/model", run_id, tags={"job_key": job.key}
        )
        self.client.set_tag(run_id, "registered_model", f"{name}/{version.version}")

    def _batch(
        self,
        run_id: str,
        metrics: list[Any] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        metrics = metrics or []
        params_list = [Param(k, _param_value(v)) for k, v in (params or {}).items()]
        tags_list = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for start in range(0, max(len(metrics), 1), 1000):  # MLflow takes 1000 metrics a batch
            self.client.log_batch(
                run_id,
                metrics=metrics[start : start + 1000],
                params=params_list if start == 0 else [],
                tags=tags_list if start == 0 else [],
            )


def _plan_fields(plan: RunPlan, method: str) -> dict[str, Any]:
    return {
        "sequence": plan.sequence_name,
        "dataset": plan.dataset,
        "arch": plan.arch,
        "method": method,
        "budget": plan.budget_name,
        "seed": plan.seed,
    }


def _run_name(plan: RunPlan, job: JobPlan) -> str:
    return f"{job.method} · {plan.arch} · seed {plan.seed} · {plan.budget_name}"


def _final_stage(record: Mapping[str, Any]) -> str:
    """The fit that made the final model: the chosen chain's last fit, else the last fit."""
    stages = [fit["stage"] for fit in record["fits"]]
    chain = record.get("chosen", {}).get("chain")
    if chain and chain != "main":
        stages = [s for s in stages if s.startswith(f"{chain}/")] or stages
    return stages[-1]


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:6000]


def _requirements() -> list[str]:
    """Pinned from this environment: MLflow must not infer them (no network here)."""
    return [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"numpy=={np.__version__}",
    ]


def _save_figure(curves: pd.DataFrame, title: str, path: Path) -> None:
    figure = learning_curves(curves, title)
    try:
        figure.savefig(path, dpi=90)
    finally:
        plt.close(figure)


@functools.cache
def code_version() -> str:
    """The package version plus the git commit when run from a checkout (``-dirty`` if edited)."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+{commit}" if commit else __version__
