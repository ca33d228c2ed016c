"""The paper's table rules on hand-made result tables, and the CSV → Markdown/LaTeX round trip."""

import io

import numpy as np
import pandas as pd
import pytest
from result_records import make_record

from seq2final.reporting.comparisons import paired_comparison
from seq2final.reporting.tables import (
    ResultTable,
    cells,
    format_number,
    from_csv_frame,
    mean_row_styles,
    per_arch_styles,
    render,
    table2_styles,
    to_csv_frame,
    total_train_flops,
    train_flops_once,
)
from seq2final.training.records import ResultRecord


def _records(table: dict[str, dict[str, float]], seed: int = 1) -> list[ResultRecord]:
    return [
        make_record(arch=arch, method=method, seed=seed, test_accuracy=value)
        for arch, row in table.items()
        for method, value in row.items()
    ]


def test_per_arch_rule_marks_near_oracle_bold_italic_and_near_best_bold():
    row = pd.Series({"baseline": 0.54, "ft": 0.60, "lp_ft": 0.62, "erm": 0.19, "oracle": 0.63})
    styles = per_arch_styles(row)
    assert styles.to_dict() == {
        "baseline": "", "ft": "bold", "lp_ft": "bold_italic", "erm": "", "oracle": "",
    }  # fmt: skip


def test_per_arch_rule_ties_and_a_missing_oracle():
    row = pd.Series({"baseline": 0.50, "ft": 0.60, "sft": 0.60, "jm": np.nan})
    styles = per_arch_styles(row)
    assert styles.to_dict() == {"baseline": "", "ft": "bold", "sft": "bold", "jm": ""}


def test_mean_row_rule_is_a_paired_comparison_over_shared_architectures():
    archs = ["convnet_1", "resnet_1", "densenet_1"]
    means = pd.DataFrame(
        {
            "baseline": [0.50, 0.52, 0.48],
            "ft": [0.60, 0.61, 0.59],
            # d to FT: 0, .01, .05 → mean .020 − std .022 < 0: equivalent to the best
            "sft": [0.60, 0.60, 0.54],
            # d to FT: .01, .01, .02 → mean .013 − std .005 > 0: not equivalent
            "ewc": [0.59, 0.60, 0.57],
            "oracle": [0.80, 0.80, 0.80],
        },
        index=archs,
    )
    styles = mean_row_styles(means)
    assert styles.to_dict() == {
        "baseline": "", "ft": "bold", "sft": "bold", "ewc": "", "oracle": "",
    }  # fmt: skip
    # d of FT to an oracle at .62, .60, .60: .02, −.01, .01 → mean .007 − std .012 < 0
    means["oracle"] = [0.62, 0.60, 0.60]
    assert mean_row_styles(means)["ft"] == "bold_italic"


def test_mean_row_rule_with_a_single_architecture():
    means = pd.DataFrame({"baseline": [0.5], "ft": [0.6], "oracle": [0.7]}, index=["resnet_2"])
    styles = mean_row_styles(means)
    assert styles["ft"] == "bold" and styles["baseline"] == ""


def test_table2_rule_on_method_means():
    means = pd.Series({"baseline": 0.50, "ft": 0.60, "lp_ft": 0.585, "erm": 0.3, "oracle": 0.61})
    styles = table2_styles(means)
    assert styles.to_dict() == {
        "baseline": "", "ft": "bold_italic", "lp_ft": "bold", "erm": "", "oracle": "",
    }  # fmt: skip
    assert table2_styles(means.drop("oracle"))["ft"] == "bold"


def test_a_convnet_job_shown_under_two_names_fills_the_one_layer_column_only():
    record = make_record(arch="convnet_4", method="st_b", aliases=["st_1"], seed=1,
                         test_accuracy=0.5)  # fmt: skip
    table = cells([record])
    assert table[["method", "mean"]].values.tolist() == [["st_1", 0.5]]


def test_cells_average_seeds_and_missing_cells_stay_missing():
    records = _records({"convnet_1": {"baseline": 0.5, "ft": 0.6}}, seed=1)
    records += _records({"convnet_1": {"baseline": 0.7, "ft": 0.6}, "resnet_1": {"ft": 0.8}}, 2)
    table = ResultTable.from_cells(cells(records))
    assert table.means.at["convnet_1", "baseline"] == pytest.approx(0.6)
    assert table.stds.at["convnet_1", "baseline"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert np.isnan(table.means.at["resnet_1", "baseline"])
    markdown = render(table, "markdown")
    assert "| resnet_1 | – |" in markdown
    assert "0.00" not in markdown and ".60 ± .14" in markdown


def test_csv_round_trip_renders_identically():
    records = _records(
        {
            "convnet_1": {"baseline": 0.51, "ft": 0.60, "oracle": 0.62},
            "resnet_2": {"baseline": 0.55, "ft": 0.58, "lp_ft": 0.61, "oracle": 0.64},
        }
    )
    table = ResultTable.from_cells(cells(records))
    buffer = io.StringIO()
    to_csv_frame(table).to_csv(buffer, index=False)
    buffer.seek(0)
    again = from_csv_frame(pd.read_csv(buffer, keep_default_na=False, na_values=[""]))
    for fmt in ("markdown", "latex"):
        assert render(again, fmt) == render(table, fmt)
    latex = render(table, "latex")
    assert r"convnet\_1 & .51 & \textit{\textbf{.60}} & --- & .62 \\" in latex
    assert r"Mean & .53 & .59 & \textbf{.61} & .63 \\" in latex


def test_numbers_print_as_in_the_paper():
    assert format_number(0.5412) == ".54"
    assert format_number(float("nan")) == "–"
    assert format_number(0.6, 0.013) == ".60 ± .01"


def test_paired_comparison_pairs_on_arch_and_seed_and_bootstraps_the_mean():
    records = _records({"a": {"ft": 0.60, "baseline": 0.50}, "b": {"ft": 0.70, "baseline": 0.65}})
    records += _records({"a": {"ft": 0.58, "baseline": 0.50}, "c": {"ft": 0.9}}, seed=2)
    result = paired_comparison(records, "ft", "baseline", resamples=2000)
    assert result["pairs"] == 3  # (c, 2) has no baseline: left out, not averaged in
    assert result["mean_difference"] == pytest.approx((0.10 + 0.05 + 0.08) / 3)
    low, high = result["ci_low"], result["ci_high"]
    assert 0.05 - 1e-9 <= low < result["mean_difference"] < high <= 0.10 + 1e-9  # within the data
    single = paired_comparison(_records({"a": {"ft": 0.6, "baseline": 0.5}}), "ft", "baseline")
    assert single["pairs"] == 1 and np.isnan(single["ci_low"]) and np.isnan(single["ci_high"])
    absent = paired_comparison(records, "sft", "baseline")
    assert absent["pairs"] == 0 and np.isnan(absent["mean_difference"])


def test_a_job_answers_to_all_its_names_in_comparisons():
    records = [
        make_record(arch="convnet_4", method="st_b", aliases=["st_1"], seed=s,
                    test_accuracy=0.6 + s / 100)
        for s in (1, 2)
    ] + _records({"convnet_4": {"baseline": 0.5}}, 1) + _records({"convnet_4": {"baseline": 0.5}}, 2)  # fmt: skip
    for name in ("st_1", "st_b"):
        assert paired_comparison(records, name, "baseline")["pairs"] == 2


def test_a_state_shared_by_several_jobs_is_charged_once_to_them_and_in_full_to_each():
    def job(own: int, state: str, flops: int) -> ResultRecord:
        # two views of a chain: each its own state, both starting from one step-0 model
        return make_record(train_flops=own, historical_flops={"shared": True,
                           "states": {state: flops, "step0": 100}})  # fmt: skip

    views = [job(1, "chain-0-1", 10), job(2, "chain-0-2", 20)]
    pooled = make_record(train_flops=4, historical_flops=None)
    assert [total_train_flops(r) for r in views] == [111, 122]  # what reproducing each costs
    assert train_flops_once([*views, pooled]) == 1 + 2 + 4 + 10 + 20 + 100
