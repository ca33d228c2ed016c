"""Project pipelines, found by Kedro's ``find_pipelines``."""

from __future__ import annotations

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

_ASKED_FOR = ("robustness", "representations")


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline folder under ``pipelines/``, and ``__default__`` chaining all that run on
    one sequence, but two a run asks for by name: ``robustness`` reads a family's members
    together, after they ran (docs/intensity.md), and ``representations`` fits (kinds × sizes)
    models per historical state (docs/representations.md).

    Each pipeline is its own namespace (kedro-viz collapses the full view into them). A node
    that several pipelines share is the same node, in its owner's namespace, in each of them, so
    the sum holds it once.
    """
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = sum(
        (p for name, p in pipelines.items() if name not in _ASKED_FOR), Pipeline([])
    )
    return pipelines
