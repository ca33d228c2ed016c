"""The notebook runs top to bottom on the tiny project and shows a table, runs and a figure."""

import json
import shutil
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "explore_results.ipynb"


def test_the_notebook_runs_on_the_every_method_project(every_method_run, every_method_params):
    folder = every_method_run / "notebooks"
    folder.mkdir(exist_ok=True)
    shutil.copy(NOTEBOOK, folder)
    notebook = nbformat.read(folder / NOTEBOOK.name, as_version=4)
    (parameters,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    parameters.source += (
        f"\nRUNTIME_PARAMS = {json.dumps(every_method_params)}\nKEDRO_ENV = 'test'\n"
    )
    NotebookClient(notebook, timeout=300, resources={"metadata": {"path": str(folder)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = "".join(
        o.get("data", {}).get("text/markdown", "") + o.get("data", {}).get("text/html", "")
        for o in outputs
    )
    assert "| convnet_1 |" in shown  # the per-architecture table
    assert "st_1" in shown and "metrics.test_accuracy" in shown  # the tracked job runs
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the interpolation figure
