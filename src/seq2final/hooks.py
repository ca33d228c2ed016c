"""Project hooks: every parameter checked before any work, and a run that ends with its results."""

from __future__ import annotations

from typing import Any

import mlflow
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.io import CatalogProtocol
from kedro.pipeline import Pipeline
from mlflow.exceptions import MlflowException
from rich.console import Console
from rich.table import Table

from seq2final.config.checks import CheckedParameters, check_curve_views
from seq2final.core.errors import Seq2FinalError
from seq2final.data.family import is_family
from seq2final.pipelines.robustness.pipeline import NAMESPACE as ROBUSTNESS
from seq2final.pipelines.visualize import create_pipeline as visualize_pipeline
from seq2final.reporting.tables import report_folder
from seq2final.tracking.display import ui_url
from seq2final.tracking.kedro_hook import TrackingHook
from seq2final.tracking.names import sequence_names
from seq2final.training.tuner import check_storage


class ValidateParametersHook:
    """Check every run parameter as soon as the context exists, so a typo costs no work, and keep
    the checked run for the other hooks (``checked``) and the nodes (the ``checked_run`` and its
    typed parts, :meth:`~seq2final.config.checks.CheckedRun.datasets`): the parameters are
    validated once, as kedro-mlflow's hook validates its configuration once and keeps it.

    It reads the raw parameters, not ``context.params``, which Kedro builds by validating them
    itself and would report a bad value over several lines; ours says it in one.
    """

    def __init__(self, checked: CheckedParameters) -> None:
        self.checked = checked

    @hook_impl(tryfirst=True)
    def after_context_created(self, context: KedroContext) -> None:
        run = self.checked.check(context.config_loader["parameters"])
        check_storage(run.parameters.tuning.storage)

    @hook_impl(tryfirst=True)
    def after_catalog_created(self, catalog: CatalogProtocol) -> None:
        """The checked run and its typed parts, as the datasets the pipelines start from."""
        for name, value in self.checked.checked().datasets().items():
            catalog.save(name, value)

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline) -> None:
        """A family trains member by member (``kedro run`` and ``kedro sweep`` expand it); a
        session given one runs only the pipeline that reads the members together. A pipeline
        that fits data-efficiency curves checks where they are tested
        (:func:`~seq2final.config.checks.check_curve_views`)."""
        checked = self.checked.checked()
        if "representation_curves" in pipeline.all_outputs():
            check_curve_views(checked)
        run = checked.parameters
        if not is_family(run.sequence, run.intensities):
            return
        others = sorted({n.namespace or n.name for n in pipeline.nodes} - {ROBUSTNESS})
        if others:
            raise Seq2FinalError(
                f"sequence '{run.sequence}' with intensities {run.intensities} is a family: "
                f"pipelines {', '.join(others)} run one sequence; valid: the '{ROBUSTNESS}' "
                "pipeline, or `kedro run` / `kedro sweep`, which run each member"
            )


class RunSummaryHook:
    """Ends a run with its results as a table at the terminal's width, then where things are.

    The table is printed, not logged: a log record would wrap it at the log's width and prefix
    each line with a time stamp, which breaks its rows. The folders follow, so a first run leads
    on to its tables, figures and MLflow runs.
    """

    def __init__(self, checked: CheckedParameters) -> None:
        self.checked = checked
        self._tables: list[tuple[str, Table]] = []
        self._drawn: set[str] = set()

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._tables, self._drawn = [], set()  # one hook serves every session

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any) -> None:
        if dataset_name.endswith("_figures") and data:  # this run drew into the folder
            self._drawn.add(dataset_name)
        if dataset_name == "run_table":  # adapt_final's table, as its report holds it
            table = Table()
            for column in data.columns:
                table.add_column(column, justify="left" if column in ("method", "") else "right")
            for name, row in data.rows.items():
                style = {data.reference: "italic", data.best: "bold"}.get(name)
                table.add_row(*row, style=style)
            self._tables.append((data.title, table))

    @hook_impl
    def after_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: CatalogProtocol
    ) -> None:
        if self.checked.run is None:
            return
        console = Console()
        for title, table in self._tables:  # the title above, not in, the table: it never wraps
            console.print(title, style="bold", highlight=False, soft_wrap=True)
            console.print(table)
        for line in self._locations(pipeline.all_outputs()):
            console.print(line, highlight=False, soft_wrap=True)

    def _locations(self, outputs: set[str]) -> list[str]:
        run = self.checked.checked()
        spec = run.spec
        folder = report_folder(spec.name, spec.dataset)
        lines = []
        if "adapt_results" in outputs:
            lines.append("Results: data/07_model_output/results/ (one JSON record per job)")
        if "result_table_reports" in outputs:
            lines.append(
                f"Tables: data/08_reporting/result_table_reports/{folder}/ (Markdown; CSV and "
                "LaTeX beside)"
            )
        if "robustness_reports" in outputs:
            lines.append(
                f"Robustness: data/08_reporting/robustness_reports/{folder}/ (Markdown; CSV in "
                "robustness_tables, PNG in robustness_figures)"
            )
        # Only the folders this run drew into (not the per-build figures): a figure with
        # nothing to draw is not saved, and a folder an earlier run filled is not this run's.
        drawn = self._drawn & outputs & visualize_pipeline().all_outputs()
        figures = sorted(o.removesuffix("_figures") for o in drawn)
        if figures:
            lines.append(
                f"Figures: data/08_reporting/{{{','.join(figures)}}}_figures/{folder}/ (PNG, PDF)"
            )
        mlflow_options = run.parameters.mlflow
        if mlflow_options.enabled and outputs & {"adapt_results", "result_table_reports"}:
            names = sequence_names(mlflow_options, spec.name, spec.dataset, spec.seed)
            try:
                experiment = mlflow.MlflowClient().get_experiment_by_name(names.experiment)
            except MlflowException:  # the server went away after the run: the UI's front page
                experiment = None
            where = ui_url(
                mlflow.get_tracking_uri(), experiment.experiment_id if experiment else None
            )
            lines.append(
                f"MLflow: experiment '{names.experiment}' at {where}"
                + ("" if where.startswith(mlflow.get_tracking_uri()) else " (`make mlflow`)")
                + (f", run 'summary · {spec.name} · {spec.dataset}'"
                   if "result_table_reports" in outputs else "")
            )  # fmt: skip
        if lines:
            lines.append("Log of every step: logs/info.log")
        return lines


def project_hooks() -> tuple[ValidateParametersHook, TrackingHook, RunSummaryHook]:
    """The project's hooks (``settings.HOOKS``), sharing one :class:`CheckedParameters` that
    only they hold: the first checks the run, the others read what it kept."""
    checked = CheckedParameters()
    return ValidateParametersHook(checked), TrackingHook(checked), RunSummaryHook(checked)
