"""Project pipelines, found by Kedro's ``find_pipelines``."""

from __future__ import annotations

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline folder under ``pipelines/``, and ``__default__`` chaining all that run on
    one sequence: ``robustness`` reads a family's members together, after they ran
    (docs/intensity.md).

    Each pipeline is its own namespace (kedro-viz collapses the full view into them). A node
    that several pipelines share is the same node, in its owner's namespace, in each of them, so
    the sum holds it once.
    """
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = sum(
        (p for name, p in pipelines.items() if name != "robustness"), Pipeline([])
    )
    return pipelines
