"""Figures whose content is a rule: the compute figure's Pareto front."""

import pandas as pd

from seq2final.reporting.plots import compute_pareto


def test_the_compute_figure_joins_exactly_the_pareto_front():
    points = pd.DataFrame({
        "method": ["a", "b", "c", "d", "e"],
        "train_flops": [1e9, 2e9, 3e9, 4e9, 8e9],
        "test_accuracy": [0.5, 0.45, 0.6, 0.58, 0.7],
    })  # fmt: skip
    figure = compute_pareto(points, "t")
    (front,) = [line for line in figure.axes[0].lines if line.get_label() == "Pareto front"]
    xs, ys = front.get_data()
    assert list(xs) == [1e9, 3e9, 8e9] and list(ys) == [0.5, 0.6, 0.7]  # b and d are dominated
    assert figure.axes[0].get_xscale() == "log"
