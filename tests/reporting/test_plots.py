"""Figures whose content is a rule: the compute figure's Pareto front and axis, one look per
method, labels that never overlap, no empty panel, nothing cut off, no figure left open."""

import io
import itertools
import json
import subprocess
import sys
import warnings
from itertools import combinations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.text import Annotation, Text
from result_records import make_record

from seq2final.data.family import intensity_label
from seq2final.methods import METHODS as REGISTRY
from seq2final.methods import paper_columns
from seq2final.reporting import plots
from seq2final.reporting.plots import (
    compute_pareto,
    interpolation_panels,
    learning_curve_overview,
    method_style,
    projection_panels,
    protocol_figure,
    svcca_panels,
)
from seq2final.reporting.plots.look import _palette, wrapped
from seq2final.reporting.protocols import ProtocolScore

METHODS = list(paper_columns())


def _saved(figure: Figure) -> Figure:
    """The figure after Kedro saved it (PNG at the catalog's dpi), drawn again on screen: the
    layout and the labels the checks read are those of the file."""
    figure.savefig(io.BytesIO(), format="png", dpi=110)
    figure.canvas.draw()
    return figure


def _crowded_points() -> pd.DataFrame:
    """Every registered method, fifteen of them on one spot, two pairs a hair apart and the rest
    close by, as a smoke run's compute figure has them."""
    steps = np.arange(len(METHODS)) - 15  # the rest in a tight diagonal, markers ~15 px apart
    flops, accuracy = 2e13 * 1.02**steps, 0.45 + 0.012 * steps
    flops[:15], accuracy[:15] = 1e13, 0.3
    flops[16], accuracy[16] = flops[17] * 1.01, accuracy[17] + 0.001  # "lp_ftagem" was this
    flops[20], accuracy[20] = flops[21], accuracy[21]
    return pd.DataFrame({"method": METHODS, "train_flops": flops, "test_accuracy": accuracy})


def _labels(figure: Figure) -> list[Annotation]:
    return [t for axis in figure.axes for t in axis.texts if isinstance(t, Annotation)]


def _assert_labels_apart_and_inside(figure: Figure) -> None:
    """No two names overlap, none leaves its axes, no leader line runs through another name."""
    renderer = figure.canvas.get_renderer()
    for axis in figure.axes:
        boxes = [Text.get_window_extent(t, renderer) for t in axis.texts]  # the text alone
        for first, second in combinations(boxes, 2):
            assert not first.overlaps(second), (first, second)
        frame = axis.get_window_extent(renderer)
        for box in boxes:
            assert frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
        for label, own in zip(axis.texts, boxes, strict=True):
            if label.arrow_patch is None:
                continue
            start = axis.transData.transform(label.xy)
            end = np.array([own.x0 + own.width / 2, own.y0 + own.height / 2])
            for share in np.linspace(0, 1, 200):
                x, y = start + share * (end - start)
                assert not any(b.contains(x, y) for b in boxes if b is not own)


def _assert_inside_figure(figure: Figure) -> None:
    """Legends and titles lie within the saved image (nothing clipped)."""
    renderer = figure.canvas.get_renderer()
    page = figure.bbox.padded(1)
    for artist in [*figure.legends, *[a.title for a in figure.axes]]:
        box = artist.get_window_extent(renderer)
        assert page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1), artist


def _named(figure: Figure) -> set[str]:
    """Every method a figure names in a label (a shared label names several)."""
    return {n.strip() for t in _labels(figure) for n in t.get_text().replace("\n", " ").split(",")}


def _looks(figure: Figure) -> dict[str, tuple[str, str]]:
    """(colour, marker) of each method-drawn artist, by the method it draws (its gid)."""
    return {
        line.get_gid(): (line.get_color(), line.get_marker())
        for axis in figure.axes
        for line in axis.lines
        if line.get_gid()
    }


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


def test_every_registered_method_has_a_look_of_its_own():
    """Over the whole registry (``METHODS``, not only the tables' columns): every method has a
    style and no two share a colour and marker; a colour is shared by two of the 30 built-in
    methods at most, far apart in the tables (erm, ewc and lisa were one orange, st_1, irm_t
    and ft_gated one olive). ``tests/lab_extras.py`` registers ``extra_*`` entries too."""
    registry = list(REGISTRY)
    assert set(registry) == set(METHODS)  # the tables show every registered method
    looks = {m: (method_style(m).colour, method_style(m).marker) for m in registry}
    assert all(colour and marker for colour, marker in looks.values())
    for first, second in combinations(registry, 2):
        assert looks[first] != looks[second], (first, second)
    ordered = [looks[m] for m in METHODS]
    for first, second in zip(ordered, ordered[1:], strict=False):  # neighbours in the tables
        assert first[0] != second[0] and first[1] != second[1]
    # the 30 built-in methods as a user without plugins sees them: a fresh interpreter, as the
    # suite's plugin takes a place in this process's table order
    code = (
        "import json; from seq2final.methods import paper_columns; "
        "from seq2final.reporting.plots import method_style; "
        "print(json.dumps([method_style(m).colour for m in paper_columns()]))"
    )
    shipped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)  # fmt: skip
    colours = json.loads(shipped.stdout)
    assert len(colours) == 30 and max(colours.count(c) for c in colours) <= 2
    for a, b in (("erm", "ewc"), ("erm", "lisa"), ("st_1", "irm_t"), ("st_1", "ft_gated")):
        assert looks[a][0] != looks[b][0], (a, b)  # the report's clashes
    assert len(set(colours)) == 15  # fifteen colours a reader can tell apart, not 30 shades


def test_the_palette_stays_distinct_beyond_the_registry():
    many = tuple(f"plugin_{index}" for index in range(plots.STYLES))
    styles = _palette(many)
    assert len({(s.colour, s.marker, s.linestyle) for s in styles.values()}) == len(many)
    assert len({(s.colour, s.marker) for s in list(styles.values())[:105]}) == 105
    assert method_style("not_registered") == method_style("not_registered")  # stable
    assert method_style("not_registered") not in {method_style(m) for m in METHODS}


def test_a_method_looks_the_same_in_every_figure():
    paths = {"convnet_4": {m: pd.DataFrame({"s": [0, 0.5, 1], "test_accuracy": [0.2, 0.3, 0.4]})
                           for m in ("ft", "sft", "agem", "erm")}}  # fmt: skip
    interpolation = interpolation_panels(paths, "t")
    compute = compute_pareto(_crowded_points(), "t")
    projection = projection_panels(_projection_frame(), "t")
    rows = [ProtocolScore("smoke", "convnet_4", m, 1, 0, {"ood_per_step": {"3": 0.4, "4": 0.5}})
            for m in ("ft", "sft", "agem")]  # fmt: skip
    protocol = protocol_figure(rows, "eval_fix", "t")
    for figure in (interpolation, compute, projection, protocol):
        for method, look in _looks(figure).items():
            style = method_style(method)
            assert look == (style.colour, style.marker), (method, figure)


def test_compute_labels_never_overlap_on_a_crowded_input():
    figure = _saved(compute_pareto(_crowded_points(), "crowded"))
    _assert_labels_apart_and_inside(figure)
    _assert_inside_figure(figure)
    named = _named(figure)
    assert set(METHODS[:15]) <= named  # the fifteen on one spot share one label
    assert len(named) >= len(METHODS) - 2  # a name left out for want of room is in the legend
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend == [*METHODS, "Pareto front"]
    renderer = figure.canvas.get_renderer()
    axis = figure.axes[0]
    boxes = [Text.get_window_extent(t, renderer) for t in axis.texts]
    for x, y in axis.transData.transform(_crowded_points()[["train_flops", "test_accuracy"]]):
        assert not any(box.contains(x, y) for box in boxes)  # no name covers a point
    (front,) = [line for line in axis.lines if line.get_label() == "Pareto front"]
    corners = axis.transData.transform(np.column_stack(front.get_data()))
    for start, end in zip(corners, corners[1:], strict=False):  # nor the front's line
        for x, y in start + np.linspace(0, 1, 200)[:, None] * (end - start):
            assert not any(box.contains(x, y) for box in boxes)


def _projection_frame(layers=("conv1", "layer1", "fc", "model"), crowd: int = 15) -> pd.DataFrame:
    """Every method but the oracle, a trajectory of three points per layer; ``crowd`` of them
    ending on one spot, as the smoke run's projection has them."""
    rng = np.random.default_rng(5)
    rows = []
    for index, method in enumerate(m for m in METHODS if m != "oracle"):
        for layer in layers:
            end = (0.4, -0.2) if index < crowd else rng.normal(size=2)
            for point in range(3):
                x, y = end if point == 2 else rng.normal(size=2)
                rows.append({"label": method, "point": point, "layer": layer, "x": x, "y": y,
                             "svcca_50": 0.5 + x / 10, "svcca_90": 0.5 + y / 10})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("draw", [projection_panels, svcca_panels])
def test_layer_panels_are_only_the_drawn_ones_and_their_labels_do_not_overlap(draw):
    figure = _saved(draw(_projection_frame(), "t"))
    assert [a.get_title() for a in figure.axes] == ["conv1", "layer1", "fc", "whole model"]
    assert len(figure.axes) == 4  # 2 × 2, not 3 + 1 beside two empty slots
    for axis in figure.axes:
        assert axis.lines and axis.get_visible()
    _assert_labels_apart_and_inside(figure)
    _assert_inside_figure(figure)
    caption = figure._supxlabel.get_text().replace("\n", " ")
    for axis in figure.axes:  # fifteen on one spot: a letter, not a text block of names
        (tag,) = [t.get_text() for t in axis.texts if t.get_text().isupper()]
        assert not any("baseline" in t.get_text() for t in axis.texts)
        assert f"{tag}: {', '.join(METHODS[:15])}" in caption  # the caption says who they are
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend[:-1] == METHODS and "before" in legend[-1]  # the paths' entry


def test_the_layer_panels_say_which_methods_they_leave_out_and_how_to_read_them():
    left_out = {"jm": "joint models: other shapes", "st_1": "joint models: other shapes"}
    frame = _projection_frame()
    frame = frame[~frame["label"].isin(left_out)]
    figure = _saved(projection_panels(frame, "t", left_out))
    caption = figure._supxlabel.get_text().replace("\n", " ")
    assert "Not drawn: st_1, jm (joint models: other shapes)." in caption
    assert "Origin: the oracle's weights" in caption
    for axis in figure.axes:  # axes in words, not the docs' shorthand
        assert "baseline" in axis.get_ylabel() and "steps 0..T−1" in axis.get_xlabel()
    _assert_inside_figure(figure)
    renderer = figure.canvas.get_renderer()
    box = figure._supxlabel.get_window_extent(renderer)
    assert figure.bbox.padded(1).contains(box.x0, box.y0)
    assert all(not a.get_window_extent(renderer).overlaps(box) for a in figure.axes)


def _distance(box, point) -> float:
    """From ``point`` to the nearest point of ``box``, pixels."""
    x, y = point
    return float(np.hypot(max(box.x0 - x, 0, x - box.x1), max(box.y0 - y, 0, y - box.y1)))


def test_no_name_sits_nearer_to_another_marker_than_to_its_own():
    """``d_ft, ewc`` was drawn beside i_ft's marker: a name must be read as its own point's."""
    figure = _saved(compute_pareto(_crowded_points(), "crowded"))
    axis = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    spots = axis.transData.transform(_crowded_points()[["train_flops", "test_accuracy"]])
    for label in axis.texts:
        if label.arrow_patch is not None:
            continue  # a leader line says whose it is
        box = Text.get_window_extent(label, renderer)
        own = axis.transData.transform(label.xy)
        mine = _distance(box, own)
        others = [p for p in spots if np.hypot(*(p - own)) > 10]  # not of its own spot
        assert all(_distance(box, p) > mine for p in others), label.get_text()


def test_a_layer_without_points_gets_no_panel_and_no_layer_no_figure():
    frame = _projection_frame(crowd=0)
    frame.loc[frame["layer"] == "fc", ["x", "y"]] = np.nan
    figure = projection_panels(frame, "t")
    assert [a.get_title() for a in figure.axes] == ["conv1", "layer1", "whole model"]
    assert projection_panels(frame.iloc[0:0], "t") is None


def test_the_interpolation_legend_is_readable_and_fits():
    methods = [*METHODS, *(f"plugin_{i}" for i in range(14))]  # 40 methods
    paths = {arch: {m: pd.DataFrame({"s": [0, 1], "test_accuracy": [0.1, 0.2]}) for m in methods}
             for arch in ("convnet_4", "resnet_4")}  # fmt: skip
    figure = _saved(interpolation_panels(paths, "t"))
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == methods
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 8
    assert all(not a.get_legend() for a in figure.axes)  # one legend, beside the panels
    _assert_inside_figure(figure)
    renderer = figure.canvas.get_renderer()
    legend_box = legend.get_window_extent(renderer)
    for axis in figure.axes:  # it covers no panel
        assert not axis.get_window_extent(renderer).overlaps(legend_box)


def _curves(epochs: int, stages: tuple[str, ...] = ("fit",)) -> pd.DataFrame:
    return pd.DataFrame([
        {"stage": stage, "epoch": epoch, "train_loss": 1.0, "train_accuracy": 0.5,
         "valid_loss": 1.0, "valid_accuracy": 0.6}
        for stage in stages for epoch in range(epochs)
    ])  # fmt: skip


def test_a_jobs_learning_curves_keep_every_label_inside_at_any_loss():
    """Fixed margins (no layout pass per job's figure): wide tick labels of small losses, two
    stages' legend and a long title still lie within the saved image."""
    page_of = {}
    for losses in ((0.0001, 0.0019), (0.002, 0.025), (0.5, 2.5)):
        curves = _curves(6, ("historical", "final"))
        curves["train_loss"] = curves["valid_loss"] = np.linspace(*losses, len(curves))
        title = "sequential_ewc+ft on source100:rotation60:corruption100:label_flip60 (convnet_1)"
        figure = _saved(plots.learning_curves(curves, title))
        renderer = figure.canvas.get_renderer()
        page = figure.bbox.padded(1)
        boxes = [axis.get_tightbbox(renderer) for axis in figure.axes]  # ticks, labels, legend
        boxes += [text.get_window_extent(renderer) for text in figure.texts]  # the title
        for box in boxes:
            assert page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1), losses
        page_of[losses] = page.bounds
    assert len(set(page_of.values())) == 1  # one size for every job


def test_the_overview_has_one_panel_per_job_with_curves():
    stages = {"lp_ft": ("head", "all"), "sft": ("exponential_2e-4_0.5/final",)}  # a long name
    jobs = [(m, _curves(4, stages.get(m, ("final",)))) for m in METHODS]
    jobs.append(("unfinished", _curves(0)))
    figure = _saved(learning_curve_overview(jobs, "t"))
    assert [a.get_title() for a in figure.axes] == METHODS
    assert all(a.lines for a in figure.axes)
    assert len(figure.axes[METHODS.index("lp_ft")].lines) == 4  # train and valid per stage
    _assert_inside_figure(figure)


def test_a_figure_is_laid_out_once_however_often_it_is_saved(monkeypatch):
    """PNG, PDF and MLflow's copy: one layout, the same axes in each. At the PDF's resolution
    nothing is cut off, and the axes lie within 4 points (measured: 2.9) of where a fresh layout
    there puts them: Agg measures hinted text at 110 dpi, about a layout pad (3 points) apart."""
    calls = []
    real = ConstrainedLayoutEngine.execute

    def counted(self, figure):
        calls.append(figure)
        return real(self, figure)

    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", counted)
    paths = {arch: {m: pd.DataFrame({"s": [0, 1], "test_accuracy": [0.1, 0.2]}) for m in METHODS}
             for arch in ("convnet_4", "resnet_4")}  # fmt: skip
    figure = interpolation_panels(paths, "t")
    positions = []
    for kind in ("png", "pdf", "png"):
        figure.savefig(io.BytesIO(), format=kind, dpi=110)
        positions.append([axis.get_position().bounds for axis in figure.axes])
    assert len(calls) == 1 and positions[0] == positions[1] == positions[2]
    figure.set_dpi(72)
    figure.canvas.draw()
    assert len(calls) == 1
    _assert_inside_figure(figure)
    real(ConstrainedLayoutEngine(), figure)  # laid out afresh, as every save did before
    fresh = [axis.get_position().bounds for axis in figure.axes]
    width, height = figure.get_size_inches() * 72
    points = np.abs(np.subtract(fresh, positions[0])) * [width, height, width, height]
    assert points.max() < 4


def test_no_figure_is_left_open_for_pyplot():
    """Kedro saves the figures after the node returns them all: a node that made them with
    pyplot held dozens open (and pyplot warned past 20). None of these may register with it."""
    trials = pd.DataFrame({"adjacency": [0.1], "valid_accuracy": [0.5], "state": ["a"]})
    before = plt.get_fignums()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "More than 20 figures")  # pyplot's warning fails here
        figures = [
            figure
            for _ in range(5)
            for figure in (
                compute_pareto(_crowded_points().iloc[:4], "t"),
                learning_curve_overview([("ft", _curves(3))], "t"),
                plots.learning_curves(_curves(3), "t"),
                plots.result_heatmap(pd.DataFrame({"ft": [0.5]}, index=["convnet_4"]), "t"),
                plots.adjacency_sweep(trials, {"baseline": 0.4, "erm": 0.45}, "t"),
            )
        ]
    assert len(figures) == 25  # pyplot would have warned at the 21st
    assert plt.get_fignums() == before


def test_a_name_the_registry_does_not_know_is_drawn_with_a_broken_line():
    """A pair of modes (``erm+as_is``) may share a registered method's colour: its line style
    differs from every registered method's solid one."""
    for name in ("erm+as_is", "not_registered", "plugin_7"):
        assert method_style(name).linestyle != "-"
    assert {method_style(m).linestyle for m in METHODS} == {"-"}


def test_beside_the_registered_methods_of_a_figure_an_unknown_name_takes_a_colour_of_its_own():
    """``erm+as_is`` hashes to ``lp_ft``'s brown; in a figure with both it takes a free colour,
    and the legend shows the look the points were drawn with."""
    assert method_style("erm+as_is").colour == method_style("lp_ft").colour  # the clash
    drawn = ["lp_ft", "erm+as_is", "ft", "plugin_7"]
    colours = [method_style(m, drawn).colour for m in drawn]
    assert len(set(colours)) == len(drawn)
    assert method_style("lp_ft", drawn) == method_style("lp_ft")  # registered: unmoved
    deltas = pd.DataFrame(
        [{"method": m, "arch": "a", "intensity": i, "nn1": 10.0 + i, "delta": -i / 100}
         for m in drawn for i in (0, 30, 60)]
    )  # fmt: skip
    slopes = pd.DataFrame(
        [{"method": m, "arch": "a", "measure": "nn1", "slope": -0.01, "intercept": 0.1}
         for m in drawn]
    )  # fmt: skip
    figure = plots.robustness_lines(deltas, slopes, "a", "title", "rotation@*: degrees per step")
    [axis] = figure.axes
    points = {to_rgb(c.get_facecolor()[0]) for c in axis.collections}
    assert points == {to_rgb(c) for c in colours}
    legend = figure.legends[0]
    shown = {
        text.get_text(): to_rgb(handle.get_color())
        for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
    }
    assert shown == {m: to_rgb(method_style(m, drawn).colour) for m in drawn}


def test_a_long_sequence_name_wraps_between_steps_never_inside_one():
    title = "Δ-accuracy: " + ":".join(["source1000"] + ["rotation@15/1000"] * 6) + " (npz, study)"
    text = wrapped(title, 40)
    lines = text.split("\n")
    assert len(lines) > 2 and all(len(line) <= 40 for line in lines)
    assert "".join(line if line.endswith(":") else line + " " for line in lines).strip() == title
    assert all(line.endswith(":") for line in lines[1:-1])  # each break after a step


def test_a_familys_figures_name_the_dials_unit_and_keep_the_references_colour_its_own():
    value = pd.DataFrame(
        [{"method": m, "arch": "a", "intensity": i, "gain": 0.1}
         for m in ("ft", "erm+as_is") for i in (0, 45, 90)]
    )  # fmt: skip
    figure = plots.history_value_lines(
        value, "baseline", "History", intensity_label("source600:rotation@*/300")
    )
    [axis] = figure.axes
    assert axis.get_xlabel() == "rotation@*: degrees per step"
    colours = {line.get_color() for line in axis.get_lines() if line.get_marker() == "^"}
    assert colours and method_style("baseline").colour not in colours  # gains over baseline


def test_sequence_examples_show_a_row_per_step_and_a_column_per_class_any_step_has():
    """Step 1 has no image of class 2: its cell stays white; step 0 has none of class 3."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 200, (6, 1, 8, 8), dtype=np.uint8)  # never white: 200 < 255
    steps = [("source", images[:3], np.array([0, 1, 2])),
             ("rotation", images[3:], np.array([0, 1, 3]))]  # fmt: skip
    figure = plots.sequence_examples(steps, ["a", "b", "c", "d"], "title", "key", columns=10)
    [axis] = figure.axes
    assert [t.get_text() for t in axis.get_xticklabels()] == ["a", "b", "c", "d"]
    assert [t.get_text() for t in axis.get_yticklabels()] == ["step 0: source", "step 1: rotation"]
    montage = axis.get_images()[0].get_array()
    gap = 2
    cell = lambda row, column: montage[row * (8 + gap) : row * (8 + gap) + 8,  # noqa: E731
                                       column * (8 + gap) : column * (8 + gap) + 8]  # fmt: skip
    assert np.all(cell(1, 2) == 1.0) and np.all(cell(0, 3) == 1.0)  # no image of the class
    np.testing.assert_allclose(cell(1, 3)[..., 0], images[5, 0] / 255.0)  # grey on all three
    assert montage.shape == (2 * 8 + gap, 4 * 8 + 3 * gap, 3)
    assert [f"{figure.get_suptitle()}", axis.get_title()] == ["title", "key"]
    assert len(plots.sequence_examples(steps, list("abcd"), "t", "k", columns=2).axes[0]
               .get_xticklabels()) == 2  # fmt: skip


def test_sequence_examples_of_three_classes_keep_the_whole_title_inside_the_image():
    """A user's folder of three classes: a narrow montage still shows the run's title whole."""
    title = "natural on folder, seed 1007: the first training image of each class, per step"
    long = ["a class named in a whole sentence, fifty characters", "another long name, also long"]
    for names in (["broken", "ok", "worn"], ["checks", "diagonal", "horizontal", "rings"], long):
        images = np.zeros((len(names), 3, 8, 8), np.uint8)
        steps = [(str(year), images, np.arange(len(names))) for year in (2019, 2020, 2021)]
        figure = _saved(plots.sequence_examples(steps, names, title,
                                                "natural-folder-seed1007-6d03044111", 10))  # fmt: skip
        renderer = figure.canvas.get_renderer()
        page = figure.bbox.padded(1)
        [axis] = figure.axes
        for text in (figure._suptitle, axis.title, axis.xaxis.label, *axis.get_xticklabels()):
            box = text.get_window_extent(renderer)
            assert page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1), text.get_text()
        assert figure.get_suptitle().replace("\n", " ") == title
        # a row no taller for long names (wrapped at 10 characters: at most 6 lines here)
        assert figure.get_size_inches()[1] <= 0.9 + 0.12 * 6 + 0.8 * 3 + 1e-9
        assert axis.get_xticks().tolist() == [4 + 10 * c for c in range(len(names))]  # centres
        boxes = [t.get_window_extent(renderer) for t in axis.get_xticklabels()]
        assert all(a.x1 < b.x0 or a.y1 < b.y0 for a, b in itertools.pairwise(boxes)), names


def test_the_shift_figure_speaks_words_not_tex_and_names_the_sequence():
    table = pd.DataFrame(
        [[2.3, 2.3, 2.2], [2.6, 2.6, 2.3], [2.3, 2.3, 2.2]],
        index=["W_X", "W_X|Y", "1-NN"], columns=["W^{0,3}", "W^{1,3}", "W^{2,3}"],
    )  # fmt: skip
    steps = ["0:source", "1:corruption", "2:label_flip"]
    figure = _saved(plots.shift_profile(table, "digits_clr on digits, seed 1", "key-1a2b", steps))
    [axis] = figure.axes
    ticks = [t.get_text() for t in axis.get_xticklabels()]
    assert ticks == ["step 0: source", "step 1: corruption", "step 2: label flip"]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert not any("^{" in t or ("_" in t and "$" not in t) for t in [*ticks, *legend])
    assert figure.get_suptitle().startswith("digits_clr on digits, seed 1")
    assert axis.get_title() == "key-1a2b"  # the content key: the small subtitle at most
    _assert_inside_figure(figure)


def test_an_adjacency_sweep_of_one_value_says_so():
    trials = pd.DataFrame({"adjacency": [1.17], "valid_accuracy": [0.3], "state": ["COMPLETE"]})
    figure = plots.adjacency_sweep(trials, {"baseline": 0.2, "erm": 0.6}, "t")
    [axis] = figure.axes
    assert any("one value, 1.17" in t.get_text() for t in axis.texts)
    low, high = axis.get_xlim()
    assert low < 1.17 < high and np.isclose(np.sqrt(low * high), 1.17)  # centred
    several = trials.assign(adjacency=[0.01]).pipe(lambda t: pd.concat([t, trials]))
    assert not plots.adjacency_sweep(several, {}, "t").axes[0].texts


def test_a_jobs_learning_curve_legend_lies_under_the_panels():
    """SFT's five stages made ten entries over its accuracy curves."""
    stages = tuple(f"schedule_{index}/final" for index in range(5))
    figure = _saved(plots.learning_curves(_curves(4, stages), "sft on s (d), a, budget b"))
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "train", "valid", *(f"stage {s}" for s in stages)
    ]  # fmt: skip
    renderer = figure.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    for axis in figure.axes:
        assert not axis.get_tightbbox(renderer).overlaps(box)
        assert axis.get_legend() is None
    assert figure.bbox.padded(1).contains(box.x0, box.y0)


def test_each_stage_in_the_legend_says_its_schedule_step_and_learning_rate():
    """SFT's stages are named by schedule and step (``exponential_2e-4_0.5/final``): the legend
    reads them as a schedule, a step and the learning rate the fit trained with, from the
    record's fits, and marks the schedule the job kept on validation."""
    fits = [("exponential_2e-4_0.5/step2", 5e-5), ("exponential_2e-4_0.5/final", 2.5e-5),
            ("none/final", None), ("ft", 1e-3), ("exponential_2e-4_0.75/final", 8.4375e-05),
            ("exponential_2e-3_0.5/final", 2.5e-4), ("linear_1e-3/final", 7e-4)]  # fmt: skip
    record = make_record(
        fits=[{"stage": stage, "params": {"dropout": 0.1} | ({"lr": lr} if lr else {}),
               "valid_accuracy": 0.5, "best_epoch": 1, "epochs": 2, "trials": 1}
              for stage, lr in fits],
        chosen={"chain": "none"},
    )  # fmt: skip
    stages = tuple(stage for stage, _ in fits)
    figure = _saved(plots.learning_curves(_curves(4, stages), "sft on s (d), a, budget b",
                                          record.stage_labels()))  # fmt: skip
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()][2:] == [
        "schedule exponential_2e-4_0.5, step2 step, lr 5e-05",
        "schedule exponential_2e-4_0.5, final step, lr 2.5e-05",
        "schedule none (kept), final step",
        "stage ft, lr 0.001",
        "schedule exponential_2e-4_0.75, final step, lr 8.44e-05",
        "schedule exponential_2e-3_0.5, final step, lr 0.00025",
        "schedule linear_1e-3, final step, lr 0.0007",
    ]
    renderer = figure.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    assert figure.bbox.padded(1).contains(box.x0, box.y0)
    assert figure.bbox.padded(1).contains(box.x1, box.y1)
