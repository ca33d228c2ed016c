"""MLflow tracking: one run per job, its Optuna trials as nested runs, its model in the registry.

A job run is a top-level run in one experiment per sequence (``seq2final/<sequence>`` by default):
a job is trained by one ``kedro run`` and reused by every later one, and comparing methods across
architectures means comparing jobs made by many ``kedro run`` calls, which the UI does best when
they are rows of one experiment. There is no run of the ``kedro run`` itself (kedro-mlflow's, see
``kedro_hook``): a job run holds everything that determines the job (its parameters), and the
sequence's summary run the tables and figures.

Every run made here has the tag ``kind`` (``job``, ``trial``; the summary run ``summary``), so a
search for ``tags.kind = 'job'`` lists one row per job. A job goes by one name everywhere, the one
the result tables, figures and terminal give it (:func:`seq2final.reporting.tables.shown_name`):
on ConvNets the job that answers both ``st_1`` and ``st_b`` is ``st_1`` in its tag ``method``, its
run name and its registered model's name, with ``st_b`` in its tag ``aliases``.

Everything a finished job logs is read back from the result store (record, curves, model file), so
a job trained while tracking was off is logged, without retraining, the next time it is reused with
tracking on. A job run is identified by the job key (tag ``job_key``): a reused job that already has
a finished run logs nothing.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import (
    Dataset,
    DatasetInput,
    InputTag,
    Metric,
    Param,
    RunTag,
)

from seq2final.methods import METHODS
from seq2final.protocols import STEP_SPLITS
from seq2final.reporting.plots import learning_curves
from seq2final.reporting.tables import shown_name
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.runs.result_store import ResultStore
from seq2final.tracking.display import metric_value, shown_csv
from seq2final.tracking.logged_models import log_and_register
from seq2final.tracking.mlflow_io import (
    NOTE,
    code_version,
    experiment_id,
    param_value,
)
from seq2final.tracking.names import MlflowNames, mlflow_names, shown_names
from seq2final.tracking.pyfunc import save_pyfunc_model
from seq2final.training.records import ResultRecord

log = logging.getLogger(__name__)

# How an Optuna trial's state shows as an MLflow run status (the exact state is a tag).
_TRIAL_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
_CURVE_COLUMNS = ("train_loss", "train_accuracy", "valid_loss", "valid_accuracy")


@dataclass
class JobTracker:
    """Logs the jobs of one plan to MLflow (see the module docstring for the layout)."""

    client: MlflowClient
    plan: RunPlan  # its ``mlflow`` options; its plugins, imported wherever a model is loaded
    sequence_spec: str
    example: np.ndarray
    num_classes: int
    sequence_digest: str = ""  # the stored sequence's content hash: the runs' dataset input
    seconds: float = 0.0  # time spent on MLflow, so its cost can be set against the run's
    _experiments: dict[str, str] = field(default_factory=dict)

    @classmethod
    def connect(
        cls,
        plan: RunPlan,
        sequence_spec: str,
        example: np.ndarray,
        num_classes: int,
        sequence_digest: str = "",
    ) -> JobTracker | None:
        """The tracker of this plan, or None when tracking is off (``plan.mlflow.enabled``).

        The URI and every name were checked by the tracking hook before the run started;
        ``example`` is a few uint8 N×C×H×W test images (the models' input example);
        ``sequence_digest`` the stored sequence's content hash. The plan's plugin import paths
        are what its registered models import when loaded.
        """
        if not plan.mlflow.enabled:
            return None
        return cls(MlflowClient(), plan, sequence_spec, example, num_classes, sequence_digest)

    def names(self, job: JobPlan, record: ResultRecord | None = None) -> MlflowNames:
        """The job's experiment and registered-model names (``record``: see :func:`shown_names`)."""
        return mlflow_names(self.plan, job, record)

    def _experiment_id(self, job: JobPlan) -> str:
        name = self.names(job).experiment
        if name not in self._experiments:
            self._experiments[name] = experiment_id(self.client, name)
        return self._experiments[name]

    def _runs(self, job: JobPlan, status: str) -> list[str]:
        """The job's runs in ``status``, newest first."""
        runs = self.client.search_runs(
            [self._experiment_id(job)],
            filter_string=(
                f"tags.job_key = '{job.key}' and tags.kind = 'job' "
                f"and attributes.status = '{status}'"
            ),
            order_by=["attributes.start_time DESC"],
        )
        return [run.info.run_id for run in runs]

    def start(self, job: JobPlan, record: ResultRecord | None = None) -> str:
        """A RUNNING run for a job about to train (or, with its ``record``, one trained
        earlier); runs an interrupted process left open end KILLED."""
        started = time.perf_counter()
        for run_id in self._runs(job, "RUNNING"):
            self.client.set_tag(run_id, "ended_by", "a later run of the same job")
            self.client.set_terminated(run_id, "KILLED")
        run = self.client.create_run(
            self._experiment_id(job),
            run_name=_run_name(self.plan, job, shown_names(job, record).name),
            tags={**self._tags(job, record), NOTE: self._description(job, record)},
        )
        self._log_params(run.info.run_id, job, record)
        self._log_dataset(run.info.run_id)
        self.seconds += time.perf_counter() - started
        return run.info.run_id

    def _log_dataset(self, run_id: str) -> None:
        """The sequence as the run's dataset input: the runs table's Dataset column then says
        what each job trained on (name and content digest; the source, data path and spec in the
        dataset's source)."""
        source = {
            "dataset": self.plan.dataset,
            "data_path": self.plan.data_path,
            "sequence_key": self.plan.sequence_key,
            "spec": self.sequence_spec,
        }
        dataset = Dataset(
            name=self.plan.sequence_name,
            digest=self.sequence_digest[:12] or self.plan.sequence_key[-10:],
            source_type="seq2final_sequence",
            source=json.dumps(source, separators=(",", ":")),
        )
        self.client.log_inputs(
            run_id, [DatasetInput(dataset, [InputTag("mlflow.data.context", "train")])]
        )

    def fail(self, run_id: str, error: BaseException) -> None:
        """End a job's run FAILED (KILLED when interrupted), never FINISHED with missing metrics.

        Called while ``error`` propagates, so a failure to reach MLflow here is logged, not raised:
        it must not replace the error the user needs to see.
        """
        interrupted = isinstance(error, KeyboardInterrupt | SystemExit)
        try:
            self.client.set_tag(run_id, "error", f"{type(error).__name__}: {error}"[:5000])
            self.client.set_terminated(run_id, "KILLED" if interrupted else "FAILED")
        except Exception as tracking_error:  # noqa: BLE001 - the job's own error matters more
            log.warning("could not mark MLflow run %s as failed: %s", run_id, tracking_error)

    def complete(self, job: JobPlan, run_id: str | None, store: ResultStore) -> None:
        """Log a finished job from the store; a reused job with a finished run logs nothing.

        A reused job that cannot be logged (MLflow unreachable, its model file gone) ends its run
        FAILED with a warning and does not stop the run; a job just trained raises.
        """
        started = time.perf_counter()
        earlier = self._runs(job, "FINISHED")
        if run_id is None and earlier:
            self.seconds += time.perf_counter() - started
            return
        reused = run_id is None
        if run_id is None:
            run_id = self.start(job, store[job.key])
            log.info("logging finished job %s to MLflow", job.key)
        try:
            self._log_result(run_id, job, store)
            self.client.set_terminated(run_id, "FINISHED")
        except Exception as error:
            self.fail(run_id, error)
            if not reused:
                raise
            log.warning("could not log finished job %s to MLflow: %s", job.key, error)
            return
        finally:
            self.seconds += time.perf_counter() - started
        for old in earlier:
            self.client.set_tag(old, "superseded_by", run_id)
            model = self.client.get_run(old).data.tags.get("logged_model")
            if model:  # its model stays registered as it was; the *Models* tab tells it apart
                self.client.set_logged_model_tags(model, {"superseded_by": run_id})
        log.info(
            "MLflow: %s logged (%.1f s of tracking in this run so far)",
            job.name, self.seconds,
        )  # fmt: skip

    # -- what a job run holds ----------------------------------------------------------------

    def _description(self, job: JobPlan, record: ResultRecord | None, curves: bool = True) -> str:
        """The run's description (the UI's *Description*): the job in words, and where the rest
        of it is, for a user who opens the run from a list of names; a job whose final mode
        trained no epoch (``curves`` false) says why it has no learning curves."""
        shown = shown_names(job, record)
        method, aliases = shown.name, shown.others
        paper = METHODS[method].paper_name if method in METHODS else method
        also = f", also `{'`, `'.join(aliases)}`" if aliases else ""
        view = f", steps {job.view.name} of the sequence" if job.view is not None else ""
        plan = self.plan
        return (
            f"{paper} (`{method}`{also}) on `{plan.sequence_name}` ({plan.dataset}){view}, "
            f"`{plan.arch}`, seed {plan.seed}, budget `{plan.budget_name}`: historical mode "
            f"`{job.historical}`, then final mode `{job.final}`. Its Optuna trials are nested "
            + (
                "under it; its result record and learning curves are under *Artifacts*, its "
                "model under *Logged models*."
                if curves
                else "under it; its result record is under *Artifacts*, its model under *Logged "
                "models*. It has no "
                f"learning curves: its final mode `{job.final}` trains no epoch on the final step."
            )
        )

    def _tags(self, job: JobPlan, record: ResultRecord | None = None) -> dict[str, str]:
        shown = shown_names(job, record)
        method, aliases = shown.name, shown.others
        family = METHODS[job.method].family if job.method in METHODS else "custom"
        tags = {
            "kind": "job",
            "job_key": job.key,
            "sequence": self.plan.sequence_name,
            "sequence_key": self.plan.sequence_key,
            "dataset": self.plan.dataset,
            "arch": self.plan.arch,
            "method": method,
            "family": family,
            "seed": str(self.plan.seed),
            "budget": self.plan.budget_name,
            "code_version": code_version(),
        }
        if aliases:  # on ConvNets st_1, sst_1 and jst_1 are the runs of st_b, sst_b and jst_b
            tags["aliases"] = ",".join(aliases)
        if job.view is not None:  # one of a temporal protocol's views of the sequence
            tags["view"] = job.view.name
            tags["view_steps"] = ",".join(map(str, job.view.steps))
        return tags

    def _log_params(self, run_id: str, job: JobPlan, record: ResultRecord | None = None) -> None:
        params = {
            "sequence": self.plan.sequence_name,
            "sequence_key": self.plan.sequence_key,
            "sequence_spec": self.sequence_spec,
            "dataset": self.plan.dataset,
            "data_path": self.plan.data_path,
            "seed": self.plan.seed,
            "arch": self.plan.arch,
            "method": shown_names(job, record).name,
            "historical": job.historical,
            "final": job.final,
            "historical_state": job.state_key,
            "budget": self.plan.budget_name,
            **{f"budget.{k}": v for k, v in self.plan.budget.results_key().items()},
            **{f"training.{k}": v for k, v in self.plan.engine.recorded().items()},
        }
        self._batch(run_id, params=params)

    def _log_result(self, run_id: str, job: JobPlan, store: ResultStore) -> None:
        record = store[job.key]
        curves = store.learning_curves(job.key)
        now = int(time.time() * 1000)
        summary = {
            name: getattr(record, name)
            for name in (
                "test_accuracy", "worst_class_accuracy", "test_nll", "ece", "valid_accuracy",
                "epochs", "trials", "wall_seconds",
            )
            if getattr(record, name) is not None  # a diverged model's NLL and ECE are not numbers
        }  # fmt: skip
        summary["parameter_count"] = record.parameters
        for name, gflop in _GFLOP_METRICS.items():  # in GFLOP, as a reader compares them
            if getattr(record, name) is not None:  # records from before FLOPs were counted lack it
                summary[gflop] = getattr(record, name) / 1e9
        if record.historical_flops:  # the shared states it continues, charged to them
            summary["historical_train_gflop"] = sum(record.shared_train_flops().values()) / 1e9
        metrics = [Metric(k, metric_value(v), now, 0) for k, v in summary.items()]
        for step, row in (record.step_accuracies or {}).items():  # a protocol's view
            metrics += [Metric(f"steps/{split}_accuracy", metric_value(getattr(row, split)), now, int(step))
                        for split in STEP_SPLITS]  # fmt: skip
        final_stage = _final_stage(record) if record.fits else None  # as_is trains nothing
        stages = list(dict.fromkeys(curves["stage"])) if len(curves) else []
        for stage, rows in curves.groupby("stage", sort=False) if stages else ():
            prefixes = (["curve"] if stage == final_stage else []) + (
                [f"stages/{stage}"] if len(stages) > 1 else []
            )
            for prefix in prefixes:
                for row in rows.itertuples():
                    for column in _CURVE_COLUMNS:
                        value = getattr(row, column)
                        if value == value:  # epoch 0 has no training metrics (NaN)
                            metrics.append(Metric(
                                f"{prefix}/{column}", metric_value(value), now, int(row.epoch)
                            ))  # fmt: skip
        params = {
            f"hp.{stage}.{k}": v
            for stage, hp in record.hyperparameters.items()
            for k, v in hp.items()
        }
        params.update({f"chosen.{k}": v for k, v in record.chosen.to_json().items()})
        tags = {"device": record.device}
        if not stages:  # the UI would show no curve and no reason
            tags[NOTE] = self._description(job, record, curves=False)
        self._batch(run_id, metrics=metrics, params=params, tags=tags)
        self._log_trials(run_id, job, record)
        if stages:  # a job that trained nothing on the final step has no curve to draw
            with tempfile.TemporaryDirectory() as folder:
                figure_path = Path(folder) / "learning_curves.png"
                _save_figure(
                    curves,
                    f"{shown_name(record)} on {record.sequence} ({record.arch})",
                    figure_path,
                    record.stage_labels(),
                )
                self.client.log_artifact(run_id, str(figure_path))
        self.client.log_artifact(run_id, str(store.record_path(job.key)))
        with tempfile.TemporaryDirectory() as folder:  # the curves as the metrics show them
            shown = Path(folder) / store.curves_path(job.key).name
            shown.write_text(shown_csv(curves))
            self.client.log_artifact(run_id, str(shown))
        if self.plan.mlflow.log_models:
            self._log_model(run_id, job, record, store)

    def _log_trials(self, run_id: str, job: JobPlan, record: ResultRecord) -> None:
        for fit in record.fits:
            for trial in fit.trial_summaries:
                tags = {
                    **self._tags(job, record),
                    "kind": "trial",
                    "mlflow.parentRunId": run_id,
                    "stage": fit.stage,
                    "trial_state": trial.state,
                }
                child = self.client.create_run(
                    self._experiment_id(job),
                    run_name=f"{fit.stage} trial {trial.number}",
                    tags=tags,
                ).info.run_id
                now = int(time.time() * 1000)
                metrics = [
                    Metric("curve/valid_accuracy", metric_value(v), now, epoch)
                    for epoch, v in enumerate(trial.valid_curve)
                ]
                if trial.value is not None:
                    metrics.append(Metric("valid_accuracy", metric_value(trial.value), now, 0))
                params: dict[str, Any] = {f"hp.{k}": v for k, v in trial.params.items()}
                params.update(stage=fit.stage, trial=trial.number)
                self._batch(child, metrics=metrics, params=params)
                self.client.set_terminated(child, _TRIAL_STATUS.get(trial.state, "KILLED"))

    def _log_model(
        self, run_id: str, job: JobPlan, record: ResultRecord, store: ResultStore
    ) -> None:
        """Log the adapted model as the job run's ``LoggedModel`` and register it
        (:func:`log_and_register`); a failure fails the run with it (``complete``)."""
        names = self.names(job, record)
        method = shown_name(record)
        tags = {
            "job_key": job.key, "method": method, "arch": self.plan.arch,
            "dataset": self.plan.dataset, "seed": str(self.plan.seed),
            "budget": self.plan.budget_name,
        }  # fmt: skip
        model, version = log_and_register(
            self.client,
            run_id,
            shown_names(job, record).model_name(job.view.name if job.view else None),
            lambda path, metadata: save_pyfunc_model(
                path,
                store.model_path(job.key),
                self.example,
                self.num_classes,
                record.engine.input_scale,
                record.eval_step,
                self.plan.plugins,
                metadata,
            ),  # fmt: skip
            tags,
            names.registered_model,
            # One name holds every dataset, seed and budget of a sequence × arch × method: the
            # version's tags tell them apart.
            {k: tags[k] for k in ("job_key", "dataset", "seed", "budget")},
            f"{method} on {self.plan.sequence_key} ({self.plan.arch})",
        )
        self._batch(run_id, tags={
            "registered_model": f"{names.registered_model}/{version}", "logged_model": model,
        })  # fmt: skip

    def _batch(
        self,
        run_id: str,
        metrics: list[Any] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self.client.log_batch(  # the client splits batches to MLflow's limits itself
            run_id,
            metrics=metrics or [],
            params=[Param(k, param_value(v)) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )


_GFLOP_METRICS = {
    "train_flops": "train_gflop",
    "eval_flops": "eval_gflop",
    "inference_flops_per_image": "inference_gflop_per_image",
}
"""The record's FLOP counts and the metrics that show them in GFLOP (``32.44``, not
``32438845440``; the record keeps the counts)."""


def _run_name(plan: RunPlan, job: JobPlan, method: str) -> str:
    view = f" · steps {job.view.name}" if job.view is not None else ""
    return f"{method}{view} · {plan.arch} · seed {plan.seed} · {plan.budget_name}"


def _final_stage(record: ResultRecord) -> str:
    """The fit that made the final model: the chosen chain's last fit, else the last fit."""
    stages = [fit.stage for fit in record.fits]
    chain = record.chosen.name
    if chain != "main":
        stages = [s for s in stages if s.startswith(f"{chain}/")] or stages
    return stages[-1]


def _save_figure(curves: pd.DataFrame, title: str, path: Path, names: Mapping[str, str]) -> None:
    # a Figure of its own, not pyplot's: nothing to close, nothing kept after it is saved
    learning_curves(curves, title, names).savefig(path, dpi=90)
