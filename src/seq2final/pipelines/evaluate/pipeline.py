"""``evaluate``: a sequence's result records → the paper's tables (CSV, Markdown, LaTeX)."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences.pipeline import resolve_sequence_node
from seq2final.pipelines.evaluate import nodes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            resolve_sequence_node(),
            Node(
                nodes.gather_results,
                inputs=["sequence_spec", "adapt_results"],
                outputs="sequence_results",
                name="gather_results",
            ),
            Node(
                nodes.tabulate_results,
                inputs=["sequence_results", "sequence_spec"],
                outputs=["result_tables", "result_table_reports", "result_table_latex"],
                name="tabulate_results",
            ),
        ]
    )
