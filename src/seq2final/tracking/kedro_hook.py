"""kedro-mlflow's hook, switched by ``mlflow.enabled`` and checked before any work."""

from __future__ import annotations

import logging
import os
from typing import Any

import mlflow
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.io import CatalogProtocol
from kedro.pipeline import Node, Pipeline
from kedro_mlflow.framework.hooks import MlflowHook
from mlflow import MlflowClient

from seq2final.config.checks import sequence_spec, validate_parameters
from seq2final.config.parameters import RunParameters
from seq2final.core.errors import Seq2FinalError
from seq2final.methods import requested_jobs
from seq2final.tracking.mlflow_io import store_setup_lock
from seq2final.tracking.names import (
    JobNames,
    check_experiment_names,
    check_registry_names,
    fail_fast,
)
from seq2final.tracking.summary import SequenceSummary

log = logging.getLogger(__name__)


class TrackingHook(MlflowHook):
    """kedro-mlflow's hook, off when ``mlflow.enabled`` is false, checked before any work.

    kedro-mlflow itself has no run-time switch (only a per-pipeline list in ``mlflow.yml``), and
    a bad tracking URI surfaces as a long traceback, or as minutes of HTTP retries, from inside
    its setup. This subclass (registered in ``settings.py`` in place of the plugin's own) skips
    every hook when tracking is off, and otherwise checks the URI and the registered-model names
    the run will use before any pipeline starts, failing in one line.
    """

    enabled = False  # until after_context_created has read the parameter
    pipeline_run = True  # kedro-mlflow's run of the whole pipeline (off with mlflow.tracking_uri)
    _run: RunParameters | None = None
    _summary: SequenceSummary | None = None

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        run = validate_parameters(context.params)
        self.enabled = run.mlflow.enabled
        self._run, self._summary = run, None  # one hook object serves every session of a process
        if not self.enabled:
            log.info("MLflow tracking is off (mlflow.enabled: false)")
            return
        self.pipeline_run = run.mlflow.tracking_uri is None
        uri = run.mlflow.tracking_uri or _configured_uri(context)
        with fail_fast():
            try:
                with store_setup_lock(uri):
                    if self.pipeline_run:
                        super().after_context_created(context)
                    else:  # a sweep's worker: job runs to the sweep's server, no pipeline run
                        mlflow.set_tracking_uri(run.mlflow.tracking_uri)
                    client = MlflowClient()
                    client.search_experiments(max_results=1)
            except Exception as error:  # MLflow, SQLAlchemy and HTTP errors alike
                reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
                raise Seq2FinalError(
                    f"MLflow setup failed on tracking URI '{uri}': {reason}"
                ) from None
            names = _job_names(run)
            check_experiment_names([n.experiment for n in names])
            if run.mlflow.log_models:
                check_registry_names(
                    client, [m for n in names for m in (n.registered_model, n.best_model)]
                )

    @hook_impl
    def after_catalog_created(  # noqa: PLR0913 (kedro-mlflow's hook signature)
        self,
        catalog: CatalogProtocol,
        conf_catalog: dict[str, Any],
        conf_creds: dict[str, Any],
        parameters: dict[str, Any],
        save_version: str,
        load_versions: dict[str, str],
    ) -> None:
        if self.enabled and self.pipeline_run:
            super().after_catalog_created(
                catalog, conf_catalog, conf_creds, parameters, save_version, load_versions
            )

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: CatalogProtocol
    ) -> None:
        if self.enabled and self.pipeline_run:
            super().before_pipeline_run(run_params, pipeline, catalog)

    @hook_impl
    def before_node_run(
        self, node: Node, catalog: CatalogProtocol, inputs: dict[str, Any], is_async: bool
    ) -> None:
        if self.enabled and self.pipeline_run:
            super().before_node_run(node, catalog, inputs, is_async)

    @hook_impl
    def after_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: CatalogProtocol
    ) -> None:
        if self.enabled and self.pipeline_run:
            try:
                super().after_pipeline_run(run_params, pipeline, catalog)
            finally:  # Kedro calls no error hook for a failure in this one
                if not self._already_active_mlflow:
                    self._close_pipeline_run()

    def _close_pipeline_run(self) -> None:
        """Take the pipeline's run off MLflow's stack of active runs entirely.

        kedro-mlflow re-opens its run before every node, and MLflow 3 pushes a run already active
        onto the stack again, so its one ``end_run`` at the end leaves the run active once per
        node. A second session in the same process (a script or notebook running several
        protocols) would then adopt it and fail on logging its parameters a second time.
        """
        while (active := mlflow.active_run()) is not None and active.info.run_id == self.run_id:
            mlflow.end_run()

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node: Node) -> None:
        """Mirror the reporting datasets into the sequence's summary run (see SequenceSummary).

        Tables and figures are logged from the objects the nodes returned, as they are saved, so
        the nodes stay free of MLflow and the files on disk and in MLflow are the same.
        """
        if (
            not self.enabled
            or dataset_name not in _SUMMARY_DATASETS
            and not (dataset_name.endswith("_figures"))
        ):
            return
        summary = self._sequence_summary()
        if dataset_name == "best_models":
            for frame in data.values():
                summary.mark_best(frame)
        elif dataset_name.endswith("_figures"):
            # Only the sequence's reporting figures (keyed by its folder), not per-build ones.
            figures = data if isinstance(data, dict) else {}
            mine = {k: f for k, f in figures.items() if k.startswith(f"{summary.folder}/")}
            summary.log_figures(f"figures/{dataset_name}", mine)
        else:
            folder, suffix = _SUMMARY_DATASETS[dataset_name]
            summary.log_text(
                folder,
                {
                    f"{key}{suffix}": value.to_csv(index=False) if suffix == ".csv" else value
                    for key, value in data.items()
                },
            )

    def _sequence_summary(self) -> SequenceSummary:
        if self._summary is None:
            assert self._run is not None
            run = self._run
            spec = sequence_spec(run)
            self._summary = SequenceSummary(
                MlflowClient(), run.mlflow, spec.name, spec.dataset, spec.seed
            )
        return self._summary

    @hook_impl
    def on_pipeline_error(
        self,
        error: Exception,
        run_params: dict[str, Any],
        pipeline: Pipeline,
        catalog: CatalogProtocol,
    ) -> None:
        if self.enabled and self.pipeline_run:
            super().on_pipeline_error(error, run_params, pipeline, catalog)


# Reporting datasets logged to the summary run: artifact folder and file suffix.
_SUMMARY_DATASETS = {
    "result_tables": ("tables", ".csv"),
    "result_table_reports": ("tables", ".md"),
    "result_table_latex": ("tables", ".tex"),
    "best_models": ("", ""),
}


def _configured_uri(context: KedroContext) -> str:
    """The URI as the user wrote it in ``mlflow.yml``, read before kedro-mlflow sets it (with
    the file pattern kedro-mlflow registers when it reads the file itself)."""
    patterns = context.config_loader.config_patterns
    patterns.setdefault("mlflow", ["mlflow*", "mlflow*/**", "**/mlflow*"])
    try:
        uri = context.config_loader["mlflow"]["server"]["mlflow_tracking_uri"]
    except Exception:  # no mlflow.yml, or no server block: MLflow's own default
        return mlflow.get_tracking_uri()
    # null: kedro-mlflow reads the environment, then its own default
    return str(uri) if uri is not None else os.environ.get("MLFLOW_TRACKING_URI", "mlruns")


def _job_names(run: RunParameters) -> list[JobNames]:
    """The names this run's jobs will use, as the tracker will render them (templates checked)."""
    spec = sequence_spec(run)
    return [
        JobNames.of(
            run.mlflow,
            sequence=spec.name,
            dataset=spec.dataset,
            arch=run.arch,
            method=job.method,
            budget=run.budget,
            seed=spec.seed,
        )
        for job in requested_jobs(run.method, run.historical, run.final, run.arch)
    ]
