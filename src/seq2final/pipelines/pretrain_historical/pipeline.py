"""``pretrain_historical``: stored sequence + run parameters → historical states, trained into their
store."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.build_sequences.pipeline import (
    in_namespace,
    select_sequence_node,
)
from seq2final.pipelines.pretrain_historical import nodes

NAMESPACE = "pretrain_historical"


def plan_jobs_node() -> Node:
    """Shared with ``adapt_final``, so each of the two pipelines can run on its own."""
    return Node(
        nodes.plan_jobs,
        inputs=["checked_run", "sequence"],
        outputs="job_plan",
        name="plan_jobs",
        namespace=NAMESPACE,
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            select_sequence_node(),
            plan_jobs_node(),
            Node(
                nodes.train_historical_states,
                inputs=["sequence", "job_plan", "historical_store"],
                outputs="historical_states",
                name="train_historical_states",
            ),
        ],
    )
