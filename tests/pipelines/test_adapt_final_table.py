"""The run's end table: every job once, best first, the best and the reference marked."""

from result_records import make_record

from seq2final.config.parameters import TuningOptions
from seq2final.methods import ModeBlock
from seq2final.pipelines.adapt_final.nodes import run_table
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.training.engine import Engine
from seq2final.training.records import ResultRecord
from seq2final.training.search import Budget


def _plan(jobs: list[JobPlan]) -> RunPlan:
    return RunPlan(
        "sequence-key", "digits_clr", "digits", None, "convnet_4", 1007, "tour",
        Budget(sampler="grid", max_epochs=1), Engine(), TuningOptions(), False, [], jobs,
    )  # fmt: skip


def _job(method: str, *requested: str) -> JobPlan:
    return JobPlan(
        f"key-{method}", method, requested or (method,), "h", "f", None, ModeBlock("final_modes.f")
    )


def _record(test: float) -> ResultRecord:
    return make_record(test_accuracy=test, valid_accuracy=test, epochs=3)


def test_rows_sorted_by_test_with_the_best_aside_from_the_oracle_and_an_alias_reference():
    jobs = [_job("baseline"), _job("st_1", "st_b"), _job("oracle"), _job("ft"), _job("sft")]
    scores = {"baseline": 0.2, "st_1": 0.6, "oracle": 0.95, "ft": 0.8, "sft": 0.7}
    results = {f"key-{name}": _record(score) for name, score in scores.items()}

    table = run_table(results, _plan(jobs), reference="st_b")

    assert list(table.rows) == ["oracle", "ft", "sft", "st_1", "baseline"]
    assert table.best == "ft"  # the oracle sees ample final data: never the best
    assert table.reference == "st_1"  # asked for by its alias, marked on its job's row
    assert table.rows["st_1"][0] == "st_1 (also st_b)"
    assert table.rows["st_1"][-1] == "reference"
    assert table.rows["ft"][-1] == "best"
    assert table.rows["oracle"][-1] == "ample final data"
