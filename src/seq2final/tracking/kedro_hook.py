"""MLflow for a Kedro run: pointed at ``mlflow.yml``'s server, switched by ``mlflow.enabled``,
checked before any work, and fed the reporting datasets of the sequence's summary run."""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import urlparse

import mlflow
from kedro.config import MissingConfigException
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.io import CatalogProtocol
from kedro.pipeline import Node
from kedro_mlflow.config.kedro_mlflow_config import KedroMlflowConfig
from mlflow import MlflowClient
from pydantic import ValidationError

from seq2final.config.checks import CheckedParameters, CheckedRun
from seq2final.core.errors import Seq2FinalError
from seq2final.methods import JobNames
from seq2final.runs.planner import planned_names
from seq2final.tracking.display import shown_csv
from seq2final.tracking.mlflow_io import store_setup_lock, trash_empty_default_experiment
from seq2final.tracking.names import (
    MlflowNames,
    check_experiment_names,
    check_registry_names,
    fail_fast,
    run_fields,
)
from seq2final.tracking.summary import SequenceSummary

log = logging.getLogger(__name__)


class TrackingHook:
    """MLflow for a Kedro run, in place of kedro-mlflow's hook (disabled in ``settings.py``).

    kedro-mlflow's hook opens one run per ``kedro run`` in an experiment of its own, logs the run
    parameters into it as text, and nothing else: a row with no metrics beside the job runs, which
    already hold every parameter that shaped them (the sequence's summary run holds its tables and
    figures). So no such run is made here. What is kept of kedro-mlflow is its ``mlflow.yml``
    (read with its own schema): this hook points MLflow at the file's server, with its credentials
    and request-header provider.

    It also does what kedro-mlflow cannot: it is off when ``mlflow.enabled`` is false, and it
    checks the URI and the names the run will use before any pipeline starts, failing in one line
    (a bad URI otherwise surfaces as a long traceback, or minutes of HTTP retries, mid-run).
    """

    enabled = False  # until after_context_created has read the parameter
    _run: CheckedRun | None = None
    _summary: SequenceSummary | None = None
    _catalog: CatalogProtocol | None = None
    _project: Path = Path(".")

    def __init__(self, checked: CheckedParameters) -> None:
        self.checked = checked  # the run parameters, validated by the first hook

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        """Set MLflow up and check what the run will name, at the earliest hook, so a bad URI or
        name costs no work; open no experiment or run (the jobs open theirs when they log)."""
        run = self.checked.checked()
        options = run.parameters.mlflow
        self.enabled = options.enabled
        self._run, self._summary = run, None  # one hook object serves every session of a process
        self._project, self._catalog = Path(context.project_path), None
        if not self.enabled:
            log.info("MLflow tracking is off (mlflow.enabled: false)")
            return
        server = _server_settings(context)
        # a sweep's worker is given the sweep's server instead of mlflow.yml's
        uri = options.tracking_uri or _configured_uri(server)
        with fail_fast():
            try:
                with store_setup_lock(uri):
                    _point_mlflow_at(context, server, uri, own=options.tracking_uri is None)
                    client = MlflowClient()
                    client.search_experiments(max_results=1)
                    trash_empty_default_experiment(client)
            except Seq2FinalError:  # a database that needs the user (store_setup_lock)
                raise
            except Exception as error:  # MLflow, SQLAlchemy and HTTP errors alike
                reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
                raise Seq2FinalError(
                    f"MLflow setup failed on tracking URI '{uri}': {reason}"
                ) from None
            names = _job_names(run)
            check_experiment_names([n.experiment for n in names])
            if options.log_models:
                check_registry_names(
                    client, [m for n in names for m in (n.registered_model, n.best_model)]
                )

    @hook_impl
    def after_catalog_created(self, catalog: CatalogProtocol) -> None:
        self._catalog = catalog  # where the figure datasets write (_written_folder)

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
            # The sequence's figures: its reporting ones (keyed by its folder) and those of its
            # build and shift (keyed by this run's sequence key), not other sequences' figures.
            figures = data if isinstance(data, dict) else {}
            key = self._run.spec.key if self._run is not None else None
            mine = {
                k: f for k, f in figures.items()
                if k.startswith(f"{summary.folder}/") or k == key or k.startswith(f"{key}/")
            }  # fmt: skip
            summary.log_figures(f"figures/{dataset_name}", mine, self._written_folder(dataset_name))
        else:
            folder, suffix = _SUMMARY_DATASETS[dataset_name]
            summary.log_text(
                folder,
                {
                    f"{key}{suffix}": shown_csv(value) if suffix == ".csv" else value
                    for key, value in data.items()
                },
            )

    def _written_folder(self, dataset_name: str) -> Path | None:
        """The local folder the catalog has just written ``dataset_name``'s figures to, so that
        MLflow's copy is those files rather than a third drawing of each figure (after the PNG
        and the PDF); None where the catalog does not say or the files are not local."""
        resolver = getattr(self._catalog, "config_resolver", None)
        if resolver is None:
            return None
        filepath = resolver.resolve_pattern(dataset_name).get("filepath")
        if not filepath or "://" in str(filepath):
            return None
        return self._project / filepath  # an absolute path stays as it is

    def _sequence_summary(self) -> SequenceSummary:
        if self._summary is None:
            assert self._run is not None
            spec = self._run.spec
            self._summary = SequenceSummary(
                MlflowClient(), self._run.parameters.mlflow, spec.name, spec.dataset, spec.seed
            )
        return self._summary


# Reporting datasets logged to the summary run: artifact folder and file suffix.
_SUMMARY_DATASETS = {
    "result_tables": ("tables", ".csv"),
    "result_table_reports": ("tables", ".md"),
    "result_table_latex": ("tables", ".tex"),
    "robustness_tables": ("robustness", ".csv"),  # a family's (its summary run: docs/intensity.md)
    "robustness_reports": ("robustness", ".md"),
    "best_models": ("", ""),
}


def _server_settings(context: KedroContext) -> KedroMlflowConfig:
    """``mlflow.yml`` as kedro-mlflow reads it (its file pattern and schema; all defaults without
    one), so the file keeps kedro-mlflow's format and ``kedro mlflow ui`` reads the same one. A
    file that does not fit is one line, before any work."""
    patterns = context.config_loader.config_patterns  # type: ignore[attr-defined]  # OmegaConfigLoader's
    patterns.setdefault("mlflow", ["mlflow*", "mlflow*/**", "**/mlflow*"])
    try:
        config = context.config_loader["mlflow"]
    except MissingConfigException:
        config = {}
    try:
        return KedroMlflowConfig.model_validate(dict(config or {}))
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise Seq2FinalError(f"mlflow.yml: '{where}': {problem['msg']}") from None


def _configured_uri(config: KedroMlflowConfig) -> str:
    """The tracking URI as the user wrote it in ``mlflow.yml``; null, as kedro-mlflow reads it:
    ``MLFLOW_TRACKING_URI``, else ``mlruns``."""
    uri = config.server.mlflow_tracking_uri
    return uri if uri is not None else os.environ.get("MLFLOW_TRACKING_URI", "mlruns")


def _point_mlflow_at(context: KedroContext, config: KedroMlflowConfig, uri: str, own: bool) -> None:
    """Point MLflow at ``uri`` and, for ``mlflow.yml``'s own server (``own``), at its registry,
    with its credentials and request-header provider, as kedro-mlflow's set-up does (without the
    experiment and run it would open)."""
    project = Path(context.project_path)
    if own:
        server = config.server
        if server.credentials:
            try:
                credentials = context.config_loader["credentials"]
            except MissingConfigException:
                credentials = {}
            os.environ.update(
                {k: str(v) for k, v in credentials.get(server.credentials, {}).items()}
            )
        if server.request_header_provider.type is not None:
            config._register_request_header_provider(context)  # kedro-mlflow's own registration
        if server.mlflow_registry_uri is not None:
            mlflow.set_registry_uri(_as_uri(server.mlflow_registry_uri, project))
    mlflow.set_tracking_uri(_as_uri(uri, project))


def _as_uri(uri: str, project: Path) -> str:
    """A URI as kedro-mlflow takes it: a bare path is a folder of the project; a URI is kept
    (``sqlite:///mlflow.db`` is relative to the working directory, the project's root)."""
    if uri in ("databricks", "databricks-uc"):
        return uri
    if PurePath(uri).is_absolute():
        return Path(uri).as_uri()
    return (project / uri).as_uri() if urlparse(uri).scheme == "" else uri


def _job_names(run: CheckedRun) -> list[MlflowNames]:
    """The names this run's jobs will use, as the tracker will render them (templates checked),
    read from the checked run (:func:`~seq2final.runs.planner.planned_names`): the run is planned
    once, by the pipeline. One job per name and one per view stand for the rest (a view's model
    is ``<name>.<view>``): every part a name is made of is checked without asking the registry
    about each job of each view. Empty without the modes' blocks, where the run can plan no job."""
    if run.blocks is None:
        return []
    picked: dict[object, tuple[JobNames, str | None]] = {}
    for names, view in planned_names(run):
        picked.setdefault(("name", names.name), (names, view))
        picked.setdefault(("view", view), (names, view))
    fields = run_fields(run)
    return [
        MlflowNames.of(run.parameters.mlflow, **fields, method=names.model_name(view))
        for names, view in dict.fromkeys(picked.values())
    ]
