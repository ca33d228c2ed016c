"""``evaluate``: a sequence's result records → the paper's tables (CSV, Markdown, LaTeX)."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences.pipeline import in_namespace
from seq2final.pipelines.evaluate import nodes

NAMESPACE = "evaluate"


def gather_results_node() -> Node:
    """Shared with ``visualize``, so either pipeline runs on its own."""
    return Node(
        nodes.gather_results,
        inputs=["sequence_spec", "adapt_results"],
        outputs="sequence_results",
        name="gather_results",
        namespace=NAMESPACE,
    )


def tabulate_curves_node() -> Node:
    """Shared with ``representations``, which fits the curves it tabulates."""
    return Node(
        nodes.tabulate_representation_curves,
        inputs=["representation_curves", "sequence_spec"],
        outputs=["representation_tables", "representation_reports"],
        name="tabulate_representation_curves",
        namespace=NAMESPACE,
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            gather_results_node(),
            Node(
                nodes.tabulate_results,
                inputs=["sequence_results", "sequence_spec", "evaluate_options", "checked_run"],
                outputs=["result_tables", "result_table_reports", "result_table_latex"],
                name="tabulate_results",
            ),
            Node(
                nodes.choose_best_models,
                inputs=["sequence_results", "sequence_spec"],
                outputs="best_models",
                name="choose_best_models",
            ),
            Node(
                nodes.tabulate_shift_scores,
                inputs=["sequence_results", "measured_distances", "sequence_spec"],
                outputs=["shift_score_tables", "shift_score_reports"],
                name="tabulate_shift_scores",
            ),
            tabulate_curves_node(),
        ],
    )
