"""What the MLflow UI shows of seq2final's runs: the saved comparison view every experiment
carries, metrics and CSV tables rounded as a reader reads them, and the links to the UI."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

UI_ADDRESS = "http://127.0.0.1:5000"
"""Where ``make mlflow`` serves the UI of the project's own store."""

SHARED_VIEW = "mlflow.sharedViewState."
"""The prefix of the experiment tags MLflow 3.17's UI keeps its saved views in."""

COMPARISON_VIEW = "compare-methods"
"""The id of the saved view every experiment seq2final creates carries (:func:`comparison_view`)."""

VIEW_ADDED = "seq2final.saved_view"
"""The experiment tag that says seq2final has added its saved view, so it never adds it again."""

COMPARISON_FILTER = (
    "tags.kind = 'job' and attributes.status = 'FINISHED' and tags.superseded_by IS NULL"
)
"""One row per job: its finished run, not an attempt cut short nor one retrained since."""

COMPARISON_COLUMNS = (
    "tags.`method`", "tags.`arch`", "metrics.`test_accuracy`", "metrics.`valid_accuracy`",
    "metrics.`worst_class_accuracy`", "metrics.`ece`", "tags.`budget`", "tags.`seed`",
    "attributes.`Models`",
)  # fmt: skip
"""The runs table's columns in the comparison view, as MLflow's UI names them (the wide
*Dataset* column left out: the sequence's digest it shows is every row's tag ``sequence_key``)."""

CHART_METRICS = ("test_accuracy", "valid_accuracy", "worst_class_accuracy", "ece")
"""The metrics the view's chart draws beside ``arch`` and ``method``: the four its table reads."""

COLUMN_WIDTHS = {
    "attributes.`Run Name`": 110, "runDateAndNestInfo": 100, "tags.`method`": 100,
    "tags.`arch`": 90, "metrics.`test_accuracy`": 115, "metrics.`valid_accuracy`": 115,
    "metrics.`worst_class_accuracy`": 160, "metrics.`ece`": 75, "tags.`budget`": 75,
    "tags.`seed`": 65, "duration": 80, "attributes.`Models`": 150,
}  # fmt: skip
"""The view's columns left to right, with their widths in pixels: MLflow's two it pins left (the
run's name and *Created*, narrowed), then the method and architecture and the four numbers a
comparison reads, so that at 1600 pixels, with MLflow's Assistant panel open on the right, they
are all on screen; MLflow's *Duration* and the model's link after them. The keys are the column
ids of MLflow 3.17's runs table (``tests/tracking/test_comparison_view.py`` checks them against
the column ids the view's own columns have)."""


def comparison_view(created_ms: int) -> str:
    """The experiment tag value of the saved view "Compare methods": one row per job
    (:data:`COMPARISON_FILTER`), best test accuracy first, the metrics a comparison needs as
    columns in the order and widths of :data:`COLUMN_WIDTHS`, and on the *Chart* tab one
    full-width parallel-coordinates chart (``arch`` and ``method`` to :data:`CHART_METRICS`),
    500 pixels high so that all of it is on screen at a 1600×1000 window: it names every method
    on its axis, where MLflow's bar chart card never labels its bars, and every axis in full,
    where two charts side by side clipped their names.

    MLflow 3.17's UI keeps an experiment's saved views as experiment tags
    ``mlflow.sharedViewState.<id>`` (an envelope holding the view's state as JSON text), lists
    them under *Saved views* and opens one from the URL parameter ``viewStateShareKey``; the
    links seq2final prints (:func:`ui_url`) open this one. Without it, MLflow opens on every
    run, trials and the summary run included, with no metric column. ``runListHidden`` gives the
    charts the runs list's width; a section's ``columns`` and ``cardHeight`` are MLflow's.
    """
    section = "seq2final-compare"
    common = {"runsCountToCompare": 100, "metricSectionId": section, "deleted": False,
              "isGenerated": False}  # fmt: skip
    charts = [
        {**common, "uuid": "seq2final-methods", "type": "PARALLEL",
         "selectedParams": ["arch", "method"], "selectedMetrics": list(CHART_METRICS),
         "showAllRuns": True},
    ]  # fmt: skip
    state = {
        "searchFilter": COMPARISON_FILTER,
        "orderByKey": "metrics.`test_accuracy`",
        "orderByAsc": False,
        "selectedColumns": list(COMPARISON_COLUMNS),
        "columnOrder": list(COLUMN_WIDTHS),
        "columnWidths": COLUMN_WIDTHS,
        "runsHiddenMode": "SHOW_ALL",
        "runListHidden": True,  # the charts draw every job, not MLflow's first ten
        # MLflow adds its own sections (one per metric prefix) after this one, sorted by name
        "compareRunCharts": charts,
        "compareRunSections": [
            {
                "uuid": section,
                "name": "Compare methods",
                "display": True,
                "isReordered": False,
                "columns": 1,
                "cardHeight": 500,
            }
        ],
    }
    return json.dumps({
        "name": "Compare methods", "createdAt": created_ms, "updatedAt": created_ms,
        "state": json.dumps(state),
    })  # fmt: skip


SIGNIFICANT_DIGITS = 4
"""Digits a logged metric keeps: an accuracy over a few hundred test images, an ECE or a wall
time has no information past them."""


def metric_value(value: float | np.floating | np.integer) -> float:
    """A metric as MLflow shows it: to :data:`SIGNIFICANT_DIGITS` significant digits
    (``0.925``, not ``0.925000011920929`` or ``0.15011541754938662``), so the UI's columns read
    at a glance; whole numbers (counts, FLOPs, epochs) and what is not finite as they are. The
    result records keep the raw values (docs/tracking.md, "Metric values")."""
    number = float(value)
    if isinstance(value, int | np.integer) or not math.isfinite(number) or number.is_integer():
        return number
    return float(f"{number:.{SIGNIFICANT_DIGITS}g}")


def shown_csv(frame: pd.DataFrame) -> str:
    """A table as MLflow shows metrics (:func:`metric_value`): floats to
    :data:`SIGNIFICANT_DIGITS` significant digits, for the CSVs logged beside them."""
    return frame.to_csv(index=False, float_format=f"%.{SIGNIFICANT_DIGITS}g")


def ui_url(tracking_uri: str, experiment: str | None = None, local: str = UI_ADDRESS) -> str:
    """The MLflow UI page of ``experiment`` (an id; all experiments when None), opening on *Model
    training*.

    MLflow 3.17's UI starts on its GenAI pages unless the browser remembers otherwise; the URL's
    ``workflowType`` parameter decides it for this page. ``local`` is where ``make mlflow`` serves
    a file or SQLite store; an ``http(s)`` tracking URI is its own UI.
    """
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else local
    if experiment is None:
        return f"{base}/#/experiments?workflowType=machine_learning"
    return (
        f"{base}/#/experiments/{experiment}/runs?workflowType=machine_learning"
        f"&viewStateShareKey={COMPARISON_VIEW}"
    )
