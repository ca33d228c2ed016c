"""``robustness``: a family's result records and shift distances → robustness slopes, history's
value against intensity, their tables and figures (docs/intensity.md).

It runs on a family only (``sequence`` with ``@*`` and ``intensities``), after its members were
trained, measured and evaluated; ``kedro run`` on a family runs it last by itself.
"""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences.pipeline import in_namespace
from seq2final.pipelines.robustness import nodes

NAMESPACE = "robustness"


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            Node(
                nodes.resolve_family,
                inputs="checked_run",
                outputs="family",
                name="resolve_family",
            ),
            Node(
                nodes.gather_family,
                inputs=["family", "adapt_results", "measured_distances", "checked_run"],
                outputs="family_points",
                name="gather_family",
            ),
            Node(
                nodes.fit_robustness,
                inputs=["family_points", "family", "checked_run"],
                outputs=["robustness_tables", "robustness_reports", "robustness_figures"],
                name="fit_robustness_slopes",
            ),
        ],
    )
