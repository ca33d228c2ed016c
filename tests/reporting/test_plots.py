"""Figures whose content is a rule: the compute figure's Pareto front and axis, colours, limits."""

import pandas as pd

from seq2final.methods import paper_columns
from seq2final.reporting.plots import _method_colour, compute_pareto, protocol_figure


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


def test_the_compute_axis_has_labelled_ticks_within_one_decade():
    points = pd.DataFrame({
        "method": ["erm", "lisa"], "train_flops": [3.3e13, 1.7e14], "test_accuracy": [0.2, 0.3],
    })  # fmt: skip
    figure = compute_pareto(points, "t")
    figure.canvas.draw()
    axis = figure.axes[0]
    low, high = axis.get_xlim()
    labels = [t.get_text() for t in axis.get_xticklabels() if low <= t.get_position()[0] <= high]
    assert labels == ["50 TFLOP", "100 TFLOP"]


def test_every_registered_method_has_a_colour_of_its_own():
    colours = [_method_colour(method) for method in paper_columns()]
    assert len(set(colours)) == len(colours)


def test_the_stream_figure_zooms_to_its_accuracies():
    rows = [
        {"method": method, "per_time": [{"time": t, "average": a, "worst": a - 0.02}
                                        for t, a in zip((1, 2), accuracies, strict=True)]}
        for method, accuracies in (("erm", (0.21, 0.22)), ("lisa", (0.19, 0.24)))
    ]  # fmt: skip
    low, high = protocol_figure(rows, "eval_stream", "t").axes[0].get_ylim()
    assert 0.1 < low < 0.17 and 0.24 < high < 0.3  # not 0..1, where 5 points are a hair apart
