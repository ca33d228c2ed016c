"""kedro-viz builds offline, every pipeline shows, every dataset sits in a layer, nodes are named."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from seq2final.core.startup import bootstrap_once


def test_kedro_viz_build_shows_every_pipeline_with_layers_and_named_nodes(project):
    kedro = Path(sys.executable).with_name("kedro")
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(
        [str(kedro), "viz", "build"], cwd=project, env=environment, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    api = project / "build" / "api"
    bootstrap_once(project)
    from kedro.framework.project import pipelines

    assert {p.name for p in (api / "pipelines").iterdir()} == set(pipelines)
    graph = json.loads((api / "main").read_text())
    data = [n for n in graph["nodes"] if n["type"] == "data"]
    assert data and not [n["name"] for n in data if not n.get("layer")]
    tasks = [n["name"] for n in graph["nodes"] if n["type"] == "task"]
    assert tasks and not [t for t in tasks if "(" in t or "->" in t]  # named, not func([..])


def test_the_readme_links_every_registered_pipeline_as_kedro_viz_opens_one():
    """kedro-viz 12.5 opens a pipeline from ``?pid=`` (it ignores ``?pipeline_id=``): the README
    links each registered pipeline so, and none that is not registered."""
    from kedro.framework.project import pipelines

    bootstrap_once(Path(__file__).resolve().parents[1])
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    linked = set(re.findall(r"http://127\.0\.0\.1:4141/\?pid=(\w+)\)", readme))
    assert linked == set(pipelines) - {"__default__"}
    # the overview first: the full pipeline's nodes alone (kedro-viz's `types` filter)
    assert "http://127.0.0.1:4141/?pid=__default__&types=task)" in readme
    assert "4141/?pipeline_id=" not in readme
