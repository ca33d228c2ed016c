"""What kedro-viz draws of each registered pipeline, collapsed as it opens: the datasets left
loose beside the namespaces, and the layer bands in their order (none where kedro-viz finds a
cycle among the layers).

    .venv/bin/python benchmarks/kedro_viz_layout.py
"""

from __future__ import annotations

import logging
from pathlib import Path

from kedro_viz.data_access import data_access_manager
from kedro_viz.server import load_and_populate_data

PROJECT = Path(__file__).resolve().parents[1]


def main() -> None:
    logging.disable(logging.WARNING)
    load_and_populate_data(PROJECT)
    for name in [p.id for p in data_access_manager.registered_pipelines.as_list()]:
        tree = data_access_manager.create_modular_pipelines_tree_for_registered_pipeline(name)
        nodes = data_access_manager.nodes.as_dict()
        ids = data_access_manager.registered_pipelines.get_node_ids_by_pipeline_id(name)
        present = {getattr(nodes[n], "layer", None) for n in ids} - {None}
        layers = data_access_manager.get_sorted_layers_for_registered_pipeline(name)
        loose = [child for child in tree["__root__"].children if child.type == "data"]
        shown = [layer for layer in layers if layer in present] or "none (a cycle)"
        print(f"{name}: {len(loose)} loose datasets; layers {shown}")


if __name__ == "__main__":
    main()
