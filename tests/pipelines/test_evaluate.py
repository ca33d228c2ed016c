"""``evaluate`` on a tiny digits sequence: tables written, bad input refused in one line."""

import logging

import pandas as pd
import pytest
from result_records import make_record

from seq2final.core.errors import Seq2FinalError
from seq2final.data.spec import resolve_spec
from seq2final.pipelines.evaluate.nodes import gather_results
from seq2final.runs.result_store import ResultStore
from seq2final.training.records import ResultRecord

TINY = {
    "sequence": "source100:rotation60:corruption100:label_flip60",
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
    "mlflow": {"enabled": False},
}
RESULTS = "data/07_model_output/results"


SPEC = resolve_spec(TINY["sequence"], None, None, None, 50, 120)


def _store_result(project, arch, method, accuracy):
    """The record a finished job of the tiny sequence leaves (``evaluate`` reads records only)."""
    record = make_record(
        job_key=f"{SPEC.key}.{arch}.{method}.smoke.0", sequence=SPEC.name, dataset=SPEC.dataset,
        sequence_key=SPEC.key, seed=SPEC.seed, arch=arch, method=method, test_accuracy=accuracy,
    )  # fmt: skip
    (project / RESULTS).mkdir(parents=True, exist_ok=True)
    (project / RESULTS / f"{record.job_key}.json").write_text(record.model_dump_json())


def test_evaluate_writes_the_tables_of_every_arch_and_method(project, run_kedro, caplog):
    for arch, accuracy in (("convnet_1", 0.42), ("resnet_1", 0.36)):
        _store_result(project, arch, "baseline", accuracy)
    _store_result(project, "convnet_1", "oracle", 0.74)
    (project / RESULTS / "broken.json").write_text("{not json")
    run_kedro(["evaluate"], **TINY)
    # The corrupt record is named and skipped, never counted.
    store = ResultStore(project / RESULTS, project / "data/06_models/final", project / "x")
    logger = logging.getLogger("seq2final")  # Kedro's logging set-up detached caplog from root
    logger.addHandler(caplog.handler)
    try:
        assert len(gather_results(SPEC, store)) == 3
    finally:
        logger.removeHandler(caplog.handler)
    assert f"result record {project / RESULTS / 'broken.json'} cannot be read" in caplog.text

    folder = "source100-rotation60-corruption100-label_flip60-digits"
    csv = pd.read_csv(project / f"data/08_reporting/result_tables/{folder}/smoke-per_arch.csv")
    paths = [p for p in (project / RESULTS).glob("*.json") if p.name != "broken.json"]
    records = [ResultRecord.model_validate_json(p.read_bytes()) for p in paths]
    by_cell = {(r.arch, r.method): r.test_accuracy for r in records}
    cell_rows = csv[~csv["arch"].isin(["Mean", "Std"])]
    assert {(a, m): v for a, m, v in zip(cell_rows.arch, cell_rows.method, cell_rows["mean"],
                                        strict=True)} == pytest.approx(by_cell)  # fmt: skip
    markdown = project / f"data/08_reporting/result_table_reports/{folder}/smoke-per_arch.md"
    text = markdown.read_text()
    assert "| resnet_1 |" in text and "–" in text  # resnet_1 has no oracle: a missing cell
    latex = project / f"data/08_reporting/result_table_latex/{folder}/smoke-per_arch.tex"
    assert r"\begin{tabular}" in latex.read_text()
    summary = pd.read_csv(project / f"data/08_reporting/result_tables/{folder}/smoke-summary.csv")
    assert list(summary["method"]) == ["baseline", "oracle"]
    assert summary.set_index("method").at["baseline", "architectures"] == 2


def test_evaluate_without_results_names_the_command(project, run_kedro):
    with pytest.raises(
        Seq2FinalError, match="no results for sequence .* make them with: kedro run"
    ):
        run_kedro(["evaluate"], **TINY)


def test_records_of_another_specification_under_the_same_name_are_refused(project, run_kedro):
    _store_result(project, "convnet_1", "baseline", 0.42)
    other = {**TINY, "build_sequences": {"test_size": 40, "oracle_size": 120}}
    with pytest.raises(Seq2FinalError, match="different specifications"):
        run_kedro(["evaluate"], **other)


def test_two_settings_under_one_budget_name_are_refused_not_averaged_as_seeds():
    spec = resolve_spec(TINY["sequence"], None, None, None, 50, 120)

    def record(method: str, seed: int, accuracy: float) -> ResultRecord:
        at_seed = resolve_spec(TINY["sequence"], None, None, seed, 50, 120)
        return make_record(sequence=spec.name, dataset=spec.dataset, sequence_key=at_seed.key,
                           budget="smoke", arch="convnet_1", method=method, seed=seed,
                           test_accuracy=accuracy)  # fmt: skip

    seeds = {"a": record("baseline", 1, 0.4), "b": record("baseline", 2, 0.5),
             "c": record("ft", 1, 0.6)}  # fmt: skip
    assert len(gather_results(spec, seeds)) == 3
    again = {**seeds, "d": record("baseline", 1, 0.45)}  # the same cell and seed: another setting
    with pytest.raises(Seq2FinalError, match="results a and d are both baseline on convnet_1 "
                       "with budget smoke and seed 1") as error:  # fmt: skip
        gather_results(spec, again)
    assert "\n" not in str(error.value)


def test_shift_scores_put_each_states_detection_beside_the_pixel_distances():
    from seq2final.pipelines.evaluate.nodes import tabulate_shift_scores

    spec = resolve_spec(TINY["sequence"], None, None, None, 50, 120)

    def record(method, historical, state, seed, auroc):
        return make_record(sequence=spec.name, dataset=spec.dataset, sequence_key=f"key{seed}",
                           arch="convnet_1", method=method, historical=historical,
                           historical_state=state, seed=seed, detection_auroc=auroc)  # fmt: skip

    records = [record("ft", "erm", "erm-1", 1, 0.9), record("lp_ft", "erm", "erm-1", 1, 0.9),
               record("ft", "erm", "erm-2", 2, 0.7), record("sft", "sequential", "s-1", 1, 0.6),
               record("baseline", "none", None, 1, None)]  # fmt: skip

    def distances(last, final):  # steps 0, 1 and the final step's own train-vs-test, to final
        return pd.DataFrame({"comparison": ["half_split", "to_final", "to_final", "to_final"],
                             "w2_covariate": [1.0, 9.0, last, final],
                             "nn1": [1.0, 9.0, 2 * last, final]})  # fmt: skip

    tables, reports = tabulate_shift_scores(
        records, {"key1": distances(3.0, 2.0), "key2": distances(5.0, 2.0)}, spec
    )
    folder = "source100-rotation60-corruption100-label_flip60-digits"
    models = tables[f"{folder}/detection"].set_index("historical")
    assert models.at["erm", "detection_auroc"] == pytest.approx(0.8)  # each state once: 0.9, 0.7
    assert models.at["erm", "seeds"] == 2 and models.at["sequential", "detection_auroc"] == 0.6
    pixels = tables[f"{folder}/pixels"].set_index("measure")
    assert pixels.at["W_X", "mean"] == pytest.approx(2.0)  # 3/2 and 5/2
    assert pixels.at["1-NN", "mean"] == pytest.approx(4.0)
    assert "cannot tell" in reports[f"{folder}/shift_scores"]
    assert tabulate_shift_scores(records[-1:], {}, spec) == ({}, {})
