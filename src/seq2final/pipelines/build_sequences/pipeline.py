"""``build_sequences``: run parameters → source pools → sampled, shifted, persisted sequence."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences import nodes

NAMESPACE = "build_sequences"


def in_namespace(namespace: str, members: list[Node]) -> Pipeline:
    """A pipeline's nodes grouped under its namespace (their names become ``<namespace>.<name>``).

    The namespace is what kedro-viz collapses a pipeline into and what ``kedro run --namespaces``
    selects. Dataset and parameter names stay as they are (no prefix), so the catalog and all code
    that names a dataset keep working. A node shared by several pipelines (so each runs on its
    own) is made in its owner's namespace by its ``*_node`` factory and keeps it here: every copy
    is then equal, and ``__default__``, the sum of all pipelines, holds it once, in one namespace.
    """
    shared = [node for node in members if node.namespace]
    own = [node for node in members if not node.namespace]
    return Pipeline(
        [*shared, Pipeline(own, namespace=namespace, prefix_datasets_with_namespace=False)]
    )


def select_sequence_node() -> Node:
    """Shared: the stored sequence the run parameters name (or a message saying how to build it)."""
    return Node(
        nodes.select_sequence,
        inputs=["sequences", "sequence_spec", "build_options"],
        outputs="sequence",
        name="select_sequence",
        namespace=NAMESPACE,
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            Node(
                nodes.load_source_data,
                inputs=["sequence_spec", "build_options"],
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
                inputs=["sequence", "build_options"],
                outputs="sequence_figures",
                name="plot_sequence_examples",
            ),
        ],
    )
