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


def create_pipeline(**kwargs) -> Pipeline:
    return in_namespace(
        NAMESPACE,
        [
            select_sequence_node(),
            plan_jobs_node(),
            Node(
                nodes.train_final_jobs,
                inputs=["sequence", "job_plan", "historical_states", "result_store"],
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
