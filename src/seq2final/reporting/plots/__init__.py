"""Figures, one module per subject: ``sequences`` (example images, sub-population membership,
shift distances), ``results`` (learning curves and the paper's figures of finished jobs), ``layers`` (its
per-layer projection and SVCCA panels),
``studies`` (robustness across a family, representation curves); ``look`` and ``labels`` hold
what they share.

Functions return matplotlib figures and never write files: Kedro's ``MatplotlibDataset`` saves
them, so where figures go is the catalog's business. Figures are built without pyplot
(:func:`look.new_figure`), so a node drawing hundreds of them never leaves one open (pyplot's "More than 20
figures have been opened" cannot appear) and each is freed once the dataset has saved it.

Legibility rules every figure here follows, because a run draws 26 methods and plugins add more:

- a method has one look everywhere (:func:`method_style`: colour × marker, from the registry's
  order), and the artists drawn for it carry its name as ``gid`` (an id in SVG output, and how
  tests find them);
- legends of methods sit outside the axes (constrained layout makes room, nothing is clipped);
- in-plot names are placed where they overlap neither each other nor a point and lie nearer to
  their own point than to any other (:func:`labels._place_labels`), and points closer than a
  few pixels share one label (a letter explained in the caption where more than two methods
  share a spot of the projection or SVCCA panels);
- titles are words (sequence, architecture, budget, seed), a content key at most a subtitle,
  and TeX only as rendered mathtext, so a figure reads without the docs;
- only panels with something to show are laid out.
"""

from seq2final.reporting.plots.layers import projection_panels, shown_layers, svcca_panels
from seq2final.reporting.plots.look import (
    LABEL_FONTSIZE,
    LEGEND_FONTSIZE,
    STYLES,
    MethodStyle,
    method_style,
)
from seq2final.reporting.plots.results import (
    adjacency_sweep,
    compute_pareto,
    forgetting_figure,
    interpolation_panels,
    learning_curve_overview,
    learning_curves,
    protocol_figure,
    result_heatmap,
)
from seq2final.reporting.plots.sequences import (
    sequence_examples,
    shift_profile,
    subpopulation_grid,
)
from seq2final.reporting.plots.studies import (
    MEASURE_LABELS,
    history_value_lines,
    robustness_lines,
    slope_against_clean,
)

__all__ = [
    "LABEL_FONTSIZE",
    "LEGEND_FONTSIZE",
    "MEASURE_LABELS",
    "MethodStyle",
    "STYLES",
    "adjacency_sweep",
    "compute_pareto",
    "forgetting_figure",
    "history_value_lines",
    "interpolation_panels",
    "learning_curve_overview",
    "learning_curves",
    "method_style",
    "projection_panels",
    "protocol_figure",
    "result_heatmap",
    "robustness_lines",
    "sequence_examples",
    "shift_profile",
    "shown_layers",
    "slope_against_clean",
    "subpopulation_grid",
    "svcca_panels",
]
