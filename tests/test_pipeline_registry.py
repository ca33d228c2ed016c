"""The registered pipelines as kedro-viz shows them: six namespaces in ``__default__`` and the two
a run asks for by name (a family's ``robustness``, ``representations``) beside them, layers in
the data's order."""

from pathlib import Path

import pytest
from kedro.config import OmegaConfigLoader
from kedro.framework.startup import bootstrap_project
from kedro.io.catalog_config_resolver import CatalogConfigResolver
from kedro.pipeline import Pipeline

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
# Kedro's data engineering convention, in the order the data flows, numbered as its data folders
# are: kedro-viz orders layers the data leaves unordered by name.
LAYERS = (
    "01_raw",
    "02_intermediate",
    "03_primary",
    "04_feature",
    "05_model_input",
    "06_models",
    "07_model_output",
    "08_reporting",
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


@pytest.fixture(scope="module")
def viz(registered):
    """kedro-viz's own model of the project, as ``kedro viz`` and ``make viz`` build it."""
    from kedro_viz.data_access import data_access_manager
    from kedro_viz.server import load_and_populate_data

    load_and_populate_data(PROJECT)
    return data_access_manager


def test_kedro_viz_shows_layer_bands_in_every_view_in_the_conventions_order(registered, viz):
    """kedro-viz sorts layers over the graph it draws, where each namespace is one collapsed
    node reading every input of its pipeline and giving every output: a cycle there hides the
    bands ("circular dependency detected among layers"). Every registered pipeline has its bands,
    in the convention's order: ``adapt_final``'s and ``representations``' models band comes after
    the plan's because ``start_states`` is made from ``job_plan``; bands the data leaves
    unordered come by name."""
    for name in registered:
        viz.create_modular_pipelines_tree_for_registered_pipeline(name)
        shown = viz.get_sorted_layers_for_registered_pipeline(name)
        nodes = viz.nodes.as_dict()
        present = {
            nodes[n].layer
            for n in viz.registered_pipelines.get_node_ids_by_pipeline_id(name)
            if getattr(nodes[n], "layer", None)
        }
        assert shown, f"{name}: kedro-viz found a cycle among the layers"
        assert [layer for layer in shown if layer in present] == [
            layer for layer in LAYERS if layer in present
        ], name


def test_no_node_takes_raw_parameters_only_the_checked_runs_parts(registered, checked_run):
    """Every parameter a node reads comes from the one check: no node input is a ``params:``
    Kedro would parse again, and every dataset the hook fills is the object the check made."""
    inputs = {i for pipeline in registered.values() for node in pipeline.nodes for i in node.inputs}
    assert sorted(i for i in inputs if i.startswith("params:") or i == "parameters") == []
    run = checked_run()
    parts = run.datasets()
    assert {"build_options", "quantify_options", "evaluate_options", "visualize_options",
            "curve_options", "budget_name", "checked_run", "sequence_spec"} <= inputs  # fmt: skip
    assert set(parts) <= inputs  # nothing published that no node reads
    assert parts["build_options"] is run.parameters.build_sequences
    assert parts["curve_options"] is run.parameters.representations
    assert parts["budget_name"] == run.parameters.budget
