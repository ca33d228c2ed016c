"""``quantify_shift``: stored sequence → PCA embedding → exact W2 distances → tables and figure."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences.pipeline import (
    in_namespace,
    select_sequence_node,
)
from seq2final.pipelines.quantify_shift import nodes

NAMESPACE = "quantify_shift"


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            select_sequence_node(),
            Node(
                nodes.embed_sequence,
                inputs=["sequence", "quantify_options"],
                outputs="shift_embedding",
                name="embed_sequence",
            ),
            Node(
                nodes.measure_distances,
                inputs=["shift_embedding", "quantify_options"],
                outputs="shift_distances",
                name="measure_shift_distances",
            ),
            Node(
                nodes.tabulate_shift,
                inputs=["shift_distances", "sequence_spec"],
                outputs=["shift_tables", "shift_reports", "shift_figures"],
                name="tabulate_shift",
            ),
        ],
    )
