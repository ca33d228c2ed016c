"""``build_sequences``: run parameters → source pools → sampled, shifted, persisted sequence."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences import nodes


def resolve_sequence_node() -> Node:
    """Shared by every pipeline that reads a sequence, so each can run on its own."""
    return Node(
        nodes.resolve_sequence,
        inputs=[
            "params:sequence",
            "params:dataset",
            "params:data_path",
            "params:seed",
            "params:build_sequences",
            "params:protocol",
        ],
        outputs="sequence_spec",
        name="resolve_sequence",
    )


def select_sequence_node() -> Node:
    """Shared: the stored sequence the run parameters name (or a message saying how to build it)."""
    return Node(
        nodes.select_sequence,
        inputs=["sequences", "sequence_spec", "params:build_sequences"],
        outputs="sequence",
        name="select_sequence",
    )


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            resolve_sequence_node(),
            Node(
                nodes.load_source_data,
                inputs=["sequence_spec", "params:build_sequences"],
                outputs="source_data",
                name="load_source_data",
            ),
            Node(
                nodes.build,
                inputs=["sequence_spec", "source_data"],
                outputs="sequences",
                name="build_sequence",
            ),
            select_sequence_node(),
            Node(
                nodes.plot_examples,
                inputs=["sequence", "params:build_sequences"],
                outputs="sequence_figures",
                name="plot_sequence_examples",
            ),
        ]
    )
