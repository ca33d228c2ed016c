"""``visualize``: a sequence's finished jobs → the paper's figures (PNG, PDF, plotly)."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences.pipeline import in_namespace
from seq2final.pipelines.evaluate.pipeline import gather_results_node
from seq2final.pipelines.visualize import nodes

_STORES = ["adapt_results", "historical_states"]

NAMESPACE = "visualize"


def plot_curves_node() -> Node:
    """Shared with ``representations``, which fits the curves it draws."""
    return Node(
        nodes.plot_representation_curves,
        inputs=["representation_curves", "sequence_spec"],
        outputs="representation_figures",
        name="plot_representation_curves",
        namespace=NAMESPACE,
    )


def create_pipeline(**kwargs) -> Pipeline:
    """The sequence's results gathered, then one node per family of figures."""
    return in_namespace(
        NAMESPACE,
        [
            gather_results_node(),
            Node(
                nodes.interpolation_recipes,
                inputs=["sequence_results", *_STORES, "sequences", "visualize_options"],
                outputs="interpolation_paths",
                name="interpolation_paths",
            ),
            Node(
                nodes.plot_interpolation,
                inputs=[
                    "sequence_results",
                    "interpolation_paths",
                    "sequence_spec",
                    "visualize_options",
                    "budget_name",
                ],
                outputs=["interpolation_figures", "interpolation_plotly"],
                name="plot_interpolation",
            ),  # fmt: skip
            Node(
                nodes.plot_projections,
                inputs=["sequence_results", *_STORES, "sequence_spec"],
                outputs=["projection_figures", "projection_coordinates"],
                name="plot_weight_projections",
            ),
            Node(
                nodes.plot_svcca,
                inputs=[
                    "sequence_results",
                    *_STORES,
                    "sequences",
                    "sequence_spec",
                    "visualize_options",
                ],
                outputs=["svcca_figures", "svcca_coordinates"],
                name="plot_svcca",
            ),  # fmt: skip
            Node(
                nodes.plot_adjacency_sweep,
                inputs=["sequence_results", "sequence_spec"],
                outputs="adjacency_figures",
                name="plot_adjacency_sweep",
            ),
            Node(
                nodes.plot_heatmaps,
                inputs=["sequence_results", "sequence_spec", "budget_name"],
                outputs=["heatmap_figures", "heatmap_plotly"],
                name="plot_heatmaps",
            ),
            Node(
                nodes.plot_compute,
                inputs=["sequence_results", "sequence_spec"],
                outputs="compute_figures",
                name="plot_compute",
            ),
            Node(
                nodes.plot_protocol,
                inputs=["sequence_results", "sequence_spec", "checked_run"],
                outputs="protocol_figures",
                name="plot_protocol",
            ),
            Node(
                nodes.plot_learning_curves,
                inputs=["sequence_results", "adapt_results", "sequence_spec"],
                outputs="learning_curve_figures",
                name="plot_learning_curves",
            ),
            plot_curves_node(),
        ],
    )
