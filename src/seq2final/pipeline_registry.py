"""Project pipelines, found by Kedro's ``find_pipelines``."""

from __future__ import annotations

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline folder under ``pipelines/``, and ``__default__`` chaining them all.

    Each pipeline is its own namespace (kedro-viz collapses the full view into the six). A node
    that several pipelines share is the same node, in its owner's namespace, in each of them, so
    the sum holds it once.
    """
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = sum(pipelines.values(), Pipeline([]))
    return pipelines
