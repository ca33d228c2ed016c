"""The registered pipelines as kedro-viz shows them: six namespaces in ``__default__`` and the two
a run asks for by name (a family's ``robustness``, ``representations``) beside them, layers in
the data's order."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from kedro.config import OmegaConfigLoader
from kedro.framework.startup import bootstrap_project
from kedro.io.catalog_config_resolver import CatalogConfigResolver
from kedro.pipeline import Pipeline
from kedro_viz.services.layers import sort_layers

PROJECT = Path(__file__).resolve().parents[1]

PIPELINES = (
    "build_sequences",
    "quantify_shift",
    "pretrain_historical",
    "adapt_final",
    "evaluate",
    "visualize",
)
# not in __default__: one reads a family's members after they ran, one fits curves per state
ASKED_FOR = ("robustness", "representations")
# Kedro's data engineering convention, in the order the data flows.
LAYERS = (
    "raw",
    "intermediate",
    "primary",
    "feature",
    "model_input",
    "models",
    "model_output",
    "reporting",
)


@pytest.fixture(scope="module")
def registered() -> dict[str, Pipeline]:
    bootstrap_project(PROJECT)
    from kedro.framework.project import pipelines

    return dict(pipelines)


@pytest.fixture(scope="module")
def layers(registered) -> dict[str, str | None]:
    """Every dataset of ``__default__`` (parameters aside) and its ``layer:`` in the catalog."""
    loader = OmegaConfigLoader(str(PROJECT / "conf"), base_env="base", default_run_env="local")
    resolver = CatalogConfigResolver(
        loader["catalog"], default_runtime_patterns={"{default}": {"type": "MemoryDataset"}}
    )
    every = sum((registered[name] for name in ASKED_FOR), registered["__default__"])
    names = {d for d in every.datasets() if not d.startswith("params:")}
    return {
        name: (resolver.resolve_pattern(name).get("metadata") or {})
        .get("kedro-viz", {})
        .get("layer")
        for name in names - {"parameters"}
    }


def test_every_node_is_in_the_namespace_of_exactly_one_of_the_six_pipelines(registered):
    assert set(registered) == {*PIPELINES, *ASKED_FOR, "__default__"}
    default = registered["__default__"]
    assert {node.namespace for node in default.nodes} == set(PIPELINES)
    # each node once: a node shared by pipelines is one node, in its owner's namespace
    names = [node.name for node in default.nodes]
    assert (
        len(names)
        == len(set(names))
        == len({node.name for name in PIPELINES for node in registered[name].nodes})
    )
    for name in (*PIPELINES, *ASKED_FOR):
        pipeline = registered[name]
        own = pipeline.only_nodes_with_namespaces([name])
        assert own.nodes, f"{name} has no node of its own namespace"
        for node in pipeline.nodes:  # a borrowed node is its owner's, unchanged
            assert node.name.startswith(f"{node.namespace}.")
            assert node in registered[node.namespace].nodes, node.name


def test_every_dataset_sits_in_a_layer_no_earlier_than_the_data_it_is_made_from(registered, layers):
    assert not [name for name, layer in layers.items() if layer not in LAYERS]
    backwards = [
        f"{node.name}: {source} ({layers[source]}) -> {made} ({layers[made]})"
        for node in (sum((registered[name] for name in ASKED_FOR), registered["__default__"])).nodes
        for source in node.inputs
        if source in layers
        for made in node.outputs
        if LAYERS.index(layers[made]) < LAYERS.index(layers[source])
    ]
    assert not backwards


def test_kedro_viz_orders_our_layers_as_the_convention_does(registered, layers):
    """kedro-viz sorts layers by the graph (a layer above every layer made from it, ties by
    name); on our graph that order must be the convention's."""
    nodes = {name: SimpleNamespace(layer=layer) for name, layer in layers.items()}
    dependencies: dict[str, set[str]] = {name: set() for name in nodes}
    for node in (sum((registered[name] for name in ASKED_FOR), registered["__default__"])).nodes:
        nodes[node.name] = SimpleNamespace(layer=None)
        dependencies[node.name] = {o for o in node.outputs if o in layers}
        for source in node.inputs:
            if source in layers:
                dependencies[source].add(node.name)
    used = set(layers.values())
    assert sort_layers(nodes, dependencies) == [layer for layer in LAYERS if layer in used]
