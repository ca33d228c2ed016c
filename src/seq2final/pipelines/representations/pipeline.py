"""``representations``: historical states + final step → data-efficiency curves, P_rep tables and
figures (docs/representations.md). Not part of ``__default__``: it fits (kinds × sizes) models per
state, so a run asks for it."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.adapt_final.pipeline import load_start_states_node
from seq2final.pipelines.build_sequences.pipeline import (
    in_namespace,
    select_sequence_node,
)
from seq2final.pipelines.evaluate.pipeline import tabulate_curves_node
from seq2final.pipelines.pretrain_historical.pipeline import plan_jobs_node
from seq2final.pipelines.representations import nodes
from seq2final.pipelines.visualize.pipeline import plot_curves_node

NAMESPACE = "representations"


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            select_sequence_node(),
            plan_jobs_node(),
            load_start_states_node(),
            Node(
                nodes.fit_representation_curves,
                inputs=[
                    "sequence",
                    "job_plan",
                    "start_states",
                    "representation_store",
                    "curve_options",
                ],
                outputs="representation_curves",
                name="fit_representation_curves",
            ),
            tabulate_curves_node(),
            plot_curves_node(),
        ],
    )
