"""Robustness slopes and history's value on scripted accuracies (docs/intensity.md)."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from seq2final.reporting.robustness import (
    accuracy_deltas,
    fit_line,
    history_value,
    robustness_slopes,
)


def _points():
    """Two methods, one architecture, two seeds, four intensities; ERM loses 0.1 per unit of
    distance plus a seed's wiggle, FT half as much."""
    rows = []
    distance = {0: 0.0, 10: 1.0, 20: 2.5, 40: 4.0}
    for seed, wiggle in ((1, 0.01), (2, -0.02)):
        for intensity, d in distance.items():
            for method, rate, clean in (
                ("erm", 0.1, 0.9),
                ("ft", 0.05, 0.8),
                ("baseline", 0.0, 0.5),
            ):
                noise = wiggle * (intensity % 20 == 10) * (method != "baseline")
                rows.append({"intensity": intensity, "method": method, "arch": "convnet_1",
                             "seed": seed, "accuracy": clean - rate * d + noise,
                             "nn1": d, "w2_covariate": 2 * d})  # fmt: skip
    return pd.DataFrame(rows)


def test_delta_is_the_seed_mean_minus_the_clean_members():
    deltas = accuracy_deltas(_points())
    erm = deltas[deltas["method"] == "erm"]
    assert erm["clean"].tolist() == pytest.approx([0.9] * 4)
    # seed wiggles at intensity 10 (+0.01, -0.02) average to -0.005
    assert erm["delta"].tolist() == pytest.approx([0.0, -0.1 - 0.005, -0.25, -0.4])
    assert (erm["seeds"] == 2).all()


def test_the_reference_is_intensity_zero_where_the_family_has_it():
    points = _points()
    points.loc[points["intensity"] == 40, "intensity"] = -40  # a member below 0
    deltas = accuracy_deltas(points)
    erm = deltas[deltas["method"] == "erm"].set_index("intensity")
    assert erm.loc[0, "delta"] == 0.0 and erm.loc[-40, "delta"] == pytest.approx(-0.4)


def test_the_slope_is_numpys_polyfit_and_its_interval_students():
    deltas = accuracy_deltas(_points())
    slopes = robustness_slopes(deltas, ["nn1", "w2_covariate"])
    erm = deltas[deltas["method"] == "erm"]
    for measure in ("nn1", "w2_covariate"):
        row = slopes[(slopes["method"] == "erm") & (slopes["measure"] == measure)].iloc[0]
        slope, intercept = np.polyfit(erm[measure], erm["delta"], 1)
        assert (row["slope"], row["intercept"]) == pytest.approx((slope, intercept))
        assert row["r2"] == pytest.approx(np.corrcoef(erm[measure], erm["delta"])[0, 1] ** 2)
        residuals = erm["delta"] - (slope * erm[measure] + intercept)
        n = len(erm)
        spread = ((erm[measure] - erm[measure].mean()) ** 2).sum()
        stderr = math.sqrt((residuals**2).sum() / (n - 2) / spread)
        half = stats.t.ppf(0.975, n - 2) * stderr
        assert (row["low"], row["high"]) == pytest.approx((slope - half, slope + half))
        assert (row["points"], row["seeds"]) == (4, 2)  # one point a member: seeds averaged
    by_method = slopes[slopes["measure"] == "nn1"].set_index("method")["slope"]
    assert by_method["erm"] < by_method["ft"] < 0  # degrading models have negative slopes
    assert by_method["erm"] == pytest.approx(2 * by_method["ft"], rel=0.05)
    assert by_method["baseline"] == pytest.approx(0.0, abs=0.01)


def test_a_line_through_two_points_has_no_interval_and_one_point_no_slope():
    two = fit_line([0.0, 1.0], [0.0, 0.5])
    assert two["slope"] == pytest.approx(0.5) and math.isnan(two["low"]) and math.isnan(two["r2"])
    assert math.isnan(fit_line([1.0], [0.2])["slope"])
    assert math.isnan(fit_line([1.0, 1.0, 1.0], [0.2, 0.3, 0.1])["slope"])


def test_history_value_is_the_paired_gain_over_the_reference():
    value = history_value(_points(), "baseline")
    erm = value[value["method"] == "erm"].set_index("intensity")
    # seed wiggles at intensity 10 (+0.01, -0.02) average to -0.005
    assert erm.loc[10, "gain"] == pytest.approx(0.9 - 0.1 - 0.5 - 0.005)
    assert erm.loc[40, "gain"] == pytest.approx(0.9 - 0.4 - 0.5)
    assert set(value["method"]) == {"erm", "ft"} and (value["seeds"] == 2).all()
