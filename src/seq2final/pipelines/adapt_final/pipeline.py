"""``adapt_final``: historical states + final step → final models, result records, a summary."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from seq2final.pipelines.adapt_final import nodes
from seq2final.pipelines.build_sequences.pipeline import (
    in_namespace,
    select_sequence_node,
)
from seq2final.pipelines.pretrain_historical.pipeline import plan_jobs_node

NAMESPACE = "adapt_final"


def load_start_states_node() -> Node:
    """Shared with ``representations``, which fits its curves from the same states. Its output,
    in the ``06_models`` layer and made from the ``05_model_input`` plan, is also what puts the
    models band after the plan's in kedro-viz (which orders bands by the data they are made
    from)."""
    return Node(
        nodes.load_start_states,
        inputs=["job_plan", "historical_states"],
        outputs="start_states",
        name="load_start_states",
        namespace=NAMESPACE,
    )


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            select_sequence_node(),
            plan_jobs_node(),
            load_start_states_node(),
            Node(
                nodes.train_final_jobs,
                inputs=["sequence", "job_plan", "start_states", "result_store"],
                outputs="adapt_results",
                name="train_final_jobs",
            ),
            Node(
                nodes.rank_results,
                inputs=["adapt_results", "job_plan", "evaluate_options"],
                outputs="run_table",
                name="rank_results",
            ),
            Node(
                nodes.report_results,
                inputs=["run_table", "job_plan"],
                outputs="result_reports",
                name="report_results",
            ),
        ],
    )
